"""What a DRS reconfigure touches, read from the SOAP request a drs-translator sends: the
cluster, and each rule or group it adds, edits or removes.

A group is addressed by its name. A rule is edited and removed by its key (vim.cluster.RuleSpec's
`removeKey`, `info.key`), so its name is what vCenter held under that key when the call was
sent (`rule_names`, asked before the request is let through); an edit that renames the rule
touches the new name too.
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.etree import ElementTree

from tests.campaign.history import RECONFIGURE, DrsTouch


@dataclass(frozen=True)
class SpecItem:
    """One entry of a ConfigSpecEx's rulesSpec or groupSpec."""

    rule: bool
    op: str
    name: str  # info.name, or a group's removeKey; "" when the entry has none
    key: int | None = None  # a rule's info.key or removeKey


@dataclass(frozen=True)
class Reconfigure:
    cluster: str
    items: tuple[SpecItem, ...]

    @property
    def rule_keys(self) -> bool:
        """Whether a rule is addressed by key (edited or removed): its name must be asked."""
        return any(item.rule and item.key is not None for item in self.items)


def parse_reconfigure(body: bytes) -> Reconfigure | None:
    """The request's cluster and spec entries; None for any request but a DRS reconfigure.
    Raises ElementTree.ParseError for a reconfigure that is not well-formed XML."""
    if f"<{RECONFIGURE}".encode() not in body:
        return None
    call = next(e for e in ElementTree.fromstring(body).iter() if _local(e.tag) == RECONFIGURE)
    cluster = _text(_child(call, "_this"))
    spec = _child(call, "spec")
    items = []
    for entry in () if spec is None else spec:
        kind = _local(entry.tag)
        if kind not in ("rulesSpec", "groupSpec"):
            continue
        info = _child(entry, "info")
        remove_key = _text(_child(entry, "removeKey"))
        name = _text(_child(info, "name")) if info is not None else ""
        if kind == "groupSpec":
            items.append(SpecItem(False, _text(_child(entry, "operation")), name or remove_key))
            continue
        key = remove_key or (_text(_child(info, "key")) if info is not None else "")
        items.append(
            SpecItem(True, _text(_child(entry, "operation")), name, int(key) if key else None)
        )
    return Reconfigure(cluster, tuple(items))


def touches(
    reconfigure: Reconfigure, rule_names: dict[int, str] | None
) -> tuple[tuple[DrsTouch, ...], int]:
    """What the reconfigure touches, given the cluster's rules by key as vCenter held them when
    it was sent (None: vCenter did not answer), and how many rule keys stayed unresolved. A key
    vCenter does not hold touches nothing (vCenter refuses it)."""
    found: list[DrsTouch] = []
    unresolved = 0
    for item in reconfigure.items:
        if not item.rule or item.key is None:
            found.append(DrsTouch(item.op, item.name))
            continue
        if rule_names is None:
            unresolved += 1
        elif item.key in rule_names:
            found.append(DrsTouch(item.op, rule_names[item.key]))
        if item.op == "edit" and item.name and (rule_names or {}).get(item.key) != item.name:
            found.append(DrsTouch(item.op, item.name))
    return tuple(found), unresolved


def _local(tag: str) -> str:
    """An element's name without its namespace."""
    return tag.rsplit("}", 1)[-1]


def _child(element: ElementTree.Element | None, name: str) -> ElementTree.Element | None:
    if element is None:
        return None
    return next((c for c in element if _local(c.tag) == name), None)


def _text(element: ElementTree.Element | None) -> str:
    return "" if element is None else (element.text or "").strip()

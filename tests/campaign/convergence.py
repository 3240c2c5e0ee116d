"""How long each fault took to heal, from the probe's agreements (probe.py): per fault, the time
from its end (when the campaign healed it) to the first probe where the installs it hit had
labels, topology KV and DRS rules all agreeing with vCenter ("agreed"), and to the first where no
pod violated required host anti-affinity while a host was free ("repaired"); per fault kind,
the median and the longest of each, and which path was last to agree for the kind's slowest
fault. Pure: a unit test forges the agreements.

The workload goes on while faults heal (a vMotion, a new pod), so a time includes what the
workload disturbed in between: it is how long the system took to be right again, not a lower
bound of the repair path alone. A fault after which a path never agreed before the probing
ended counts as the time to the last probe, marked `>`.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Final

from tests.campaign.history import Agreement, Fault, History

PATHS: Final = ("labels", "kv", "drs", "repair")
AGREED: Final = "agreed"  # labels, KV and DRS in the same probe
# The targets (docs/reliability.md): agreed within AGREED_TARGET_S, repaired within
# REPAIRED_TARGET_S of a fault's end.
AGREED_TARGET_S: Final = 5.0
REPAIRED_TARGET_S: Final = 10.0


@dataclass(frozen=True)
class Healing:
    """One fault's times to agreement per path, agreed (labels, KV and DRS at once) and
    repaired; `open` when some path never agreed before the probing ended."""

    fault: Fault
    paths: dict[str, float]
    agreed: float
    repaired: float
    open: bool

    @property
    def slowest_path(self) -> str:
        """The path last to agree; paths that came back in the same probe joined by `=`
        (all of them: the probe saw nothing of the install until then)."""
        latest = max(self.paths.values())
        return "=".join(path for path in PATHS if self.paths[path] == latest)

    @property
    def slowest(self) -> float:
        return max(self.agreed, self.repaired)


@dataclass(frozen=True)
class KindRow:
    kind: str
    faults: int
    agreed_p50: float
    agreed_max: float
    repaired_p50: float
    repaired_max: float
    slowest: Healing


def healings(history: History) -> list[Healing]:
    """Every fault of every install (a vcsim restart, in every install's history, once), timed
    on the agreements of the installs it hit."""
    hit: dict[Fault, list[list[Agreement]]] = defaultdict(list)
    for each in history.installs:
        for fault in each.faults:
            hit[fault].append(each.agreements)
    return [_healing(fault, probes) for fault, probes in sorted(hit.items(), key=_by_start)]


def by_kind(healed: list[Healing]) -> list[KindRow]:
    kinds: dict[str, list[Healing]] = defaultdict(list)
    for healing in healed:
        kinds[healing.fault.kind].append(healing)
    return [
        KindRow(
            kind,
            len(group),
            statistics.median(h.agreed for h in group),
            max(h.agreed for h in group),
            statistics.median(h.repaired for h in group),
            max(h.repaired for h in group),
            max(group, key=lambda h: h.slowest),
        )
        for kind, group in sorted(kinds.items())
    ]


def table(healed: list[Healing]) -> list[str]:
    """The per-kind table as markdown, then how many faults met each target."""
    lines = [
        "| fault kind | faults | agreed p50 | agreed max | repaired p50 | repaired max "
        "| slowest fault's last path |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in by_kind(healed):
        mark = ">" if row.slowest.open else ""
        lines.append(
            f"| {row.kind} | {row.faults} | {row.agreed_p50:.1f} s | {row.agreed_max:.1f} s "
            f"| {row.repaired_p50:.1f} s | {row.repaired_max:.1f} s "
            f"| {row.slowest.slowest_path} ({mark}{row.slowest.slowest:.1f} s) |"
        )
    agreed = sum(1 for h in healed if h.agreed <= AGREED_TARGET_S)
    repaired = sum(1 for h in healed if h.repaired <= REPAIRED_TARGET_S)
    lines.append("")
    lines.append(
        f"agreed within {AGREED_TARGET_S:g} s: {agreed} of {len(healed)} faults; repaired "
        f"within {REPAIRED_TARGET_S:g} s: {repaired} of {len(healed)}"
    )
    if healed:
        worst = max(healed, key=lambda h: h.slowest)
        paths = ", ".join(f"{path} {worst.paths[path]:.1f} s" for path in PATHS)
        lines.append(
            f"slowest: {worst.fault.kind} {worst.fault.target or 'vcsim'} healed at "
            f"{worst.fault.end:.1f} s; first agreement per path: {paths}"
        )
    return lines


def _healing(fault: Fault, probes: list[list[Agreement]]) -> Healing:
    """The fault's times on each install it hit; the latest of them counts."""
    times = {path: 0.0 for path in (*PATHS, AGREED)}
    still_open = False
    for agreements in probes:
        after = [a for a in agreements if a.t >= fault.end]
        last = after[-1].t if after else fault.end
        for path in times:
            t = next((a.t for a in after if _agrees(a, path)), None)
            still_open |= t is None
            times[path] = max(times[path], (last if t is None else t) - fault.end)
    agreed = times.pop(AGREED)
    return Healing(fault, times, agreed, times["repair"], still_open)


def _agrees(agreement: Agreement, path: str) -> bool:
    if path == AGREED:
        return agreement.labels and agreement.kv and agreement.drs
    return {
        "labels": agreement.labels,
        "kv": agreement.kv,
        "drs": agreement.drs,
        "repair": agreement.repaired,
    }[path]


def _by_start(item: tuple[Fault, list[list[Agreement]]]) -> tuple[float, str, str]:
    fault = item[0]
    return fault.start, fault.kind, fault.target

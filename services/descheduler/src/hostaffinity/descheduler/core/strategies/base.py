"""What every strategy shares: its output (`Violation`), the pod scope args, candidate order.

A strategy only finds violations and orders the pods that could resolve each one; it never
evicts. The eviction planner takes the first candidate that may go and has somewhere better to go
(descheduler's split: pkg/framework/types/types.go gives plugins a narrow handle, and
pkg/descheduler/evictions/evictions.go owns limits and dry-run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Protocol

import msgspec

from hostaffinity.affinity.model import LabelSelector
from hostaffinity.affinity.selectors import Selector, compile_label_selector
from hostaffinity.descheduler.core.model import DeschedulerPod
from hostaffinity.descheduler.core.state import ClusterState
from hostaffinity.descheduler.core.strategies.changes import Change
from hostaffinity.descheduler.core.strategies.scope import Scope

PREFER_NO_EVICTION: Final = "descheduler.alpha.kubernetes.io/prefer-no-eviction"

# (pod key, candidate node) -> whether moving the pod there resolves the violation, beyond what
# the engine's kube-scheduler filter already guarantees (preferred rules, spreading).
TargetCheck = Callable[[str, str], bool]


@dataclass(frozen=True)
class Violation:
    """One broken rule, resolved by evicting any one of `candidates` (tried in order)."""

    strategy: str
    rule: str
    candidates: tuple[str, ...]
    why: str = ""
    improves: TargetCheck | None = None


class Args(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Base of plugin args: upstream's JSON names, unknown keys are errors."""

    def validate(self) -> list[str]:
        """Every problem with the args (empty when valid)."""
        return []


class Namespaces(Args, frozen=True):
    include: list[str] = msgspec.field(default_factory=list)
    exclude: list[str] = msgspec.field(default_factory=list)


class ScopedArgs(Args, frozen=True):
    """The pod scope most upstream plugins take: namespaces include/exclude and a selector."""

    namespaces: Namespaces | None = None
    label_selector: LabelSelector | None = None

    def validate(self) -> list[str]:
        errors = []
        if self.namespaces is not None and self.namespaces.include and self.namespaces.exclude:
            errors.append("only one of namespaces.include and namespaces.exclude can be set")
        if self.label_selector is not None and compile_label_selector(self.label_selector).nothing:
            errors.append("labelSelector is invalid (it would select no pod)")
        return errors


class PodScope:
    """Which pods a strategy looks at (podutil.NewOptions in upstream)."""

    def __init__(self, args: ScopedArgs) -> None:
        namespaces = args.namespaces or Namespaces()
        self._include = frozenset(namespaces.include)
        self._exclude = frozenset(namespaces.exclude)
        self._selector: Selector | None = (
            None if args.label_selector is None else compile_label_selector(args.label_selector)
        )

    def covers(self, pod: DeschedulerPod) -> bool:
        namespace = pod.metadata.namespace
        if self._include and namespace not in self._include:
            return False
        if namespace in self._exclude:
            return False
        return self._selector is None or self._selector.matches(pod.metadata.labels)


class Strategy(Protocol):
    """A descheduling plugin: finds violations in the cluster state.

    `scope` None judges every pod; a Scope judges at least every violation the scope's changes
    can have created (a strategy that cannot tell which judges every pod)."""

    name: ClassVar[str]
    triggers: ClassVar[Change]

    def violations(self, state: ClusterState, scope: Scope | None = None) -> list[Violation]: ...


class Plugin(Protocol):
    """A strategy class as the registry holds it: its name, its triggers, its constructor."""

    @property
    def name(self) -> str: ...

    @property
    def triggers(self) -> Change: ...

    def __call__(self, args: Any, /) -> Strategy: ...


def eviction_order(state: ClusterState, keys: Sequence[str]) -> tuple[str, ...]:
    """Who goes first: pods without prefer-no-eviction, lower priority, then the newer pod.

    Upstream sorts by priority low to high (podutil.SortPodsBasedOnPriorityLowToHigh); the
    newer pod is usually the one that arrived in violation, and it has run the least.
    """

    def rank(key: str) -> tuple[bool, int, str, str]:
        pod = state.pods[key]
        # Newest first: invert the timestamp's order through a negated sort on a second pass.
        return (
            PREFER_NO_EVICTION in pod.metadata.annotations,
            pod.spec.priority or 0,
            _inverted(pod.metadata.creation_timestamp),
            key,
        )

    return tuple(sorted(keys, key=rank))


def _inverted(timestamp: str) -> str:
    """A string that sorts newest-first for RFC 3339 timestamps of one fixed format."""
    return "".join(chr(0x10FFFF - ord(c)) if c.isdigit() else c for c in timestamp)


def describe_order(state: ClusterState, order: Sequence[str]) -> str:
    """Why the first candidate is preferred, in words."""
    first = state.pods[order[0]]
    parts = [f"priority {first.spec.priority or 0}"]
    if first.metadata.creation_timestamp:
        parts.append(f"created {first.metadata.creation_timestamp}")
    if PREFER_NO_EVICTION in first.metadata.annotations:
        parts.append("all candidates prefer no eviction")
    return f"{order[0]} first ({', '.join(parts)}): lowest priority, then newest"

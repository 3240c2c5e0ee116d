"""What a campaign saw, as plain data: the checker reads only this, so a unit test can forge one.

A campaign runs two installs of hostaffinity (two Kubernetes clusters) on one vCenter: each has
a `History` of its own (its API double's requests and writes, its processes, its bus's events,
the faults that hit it, its final state), the first one holding the others in `others`.

Times are seconds since the campaign started (one monotonic clock for the runner, the API
doubles, the proxies and the workload). `actor` is who made a request or write: a service
process's Lease identity (`<hostname>-<pid>`, the runner's default), found from the TCP proxy the
connection came through, or `campaign` for the workload and the stand-in controllers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

CAMPAIGN: Final = "campaign"
RECONFIGURE: Final = "ReconfigureComputeResource_Task"
# The op of a DrsTouch for a reconfigure whose body could not be read (its name says why).
UNPARSED: Final = "unparsed"


class Clock:
    """Seconds since the campaign began; shared by everything that stamps the history."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.started


@dataclass(frozen=True)
class ApiRequest:
    """One HTTP request the double answered, stamped when it arrived (before any fault)."""

    t: float
    actor: str
    method: str
    path: str
    status: int


@dataclass(frozen=True)
class StoredChange:
    """One write to the double's store, stamped when it was committed."""

    t: float
    actor: str
    rv: int
    storage: str
    type: str
    obj: dict[str, Any]
    prev: dict[str, Any] | None


@dataclass(frozen=True)
class DrsTouch:
    """One DRS rule or group a reconfigure adds, edits or removes, by the name vCenter held it
    under when the call was sent (a rule is edited and removed by its key); an edit that
    renames also touches its new name."""

    op: str
    name: str


@dataclass(frozen=True)
class VcenterWrite:
    """A vCenter call that changes DRS state, seen on the caller's proxy as it was sent: the
    cluster and what it touches. `unresolved` counts the rule keys that vCenter could not be
    asked about then (it was away: the call cannot have reached it either)."""

    t: float
    actor: str
    method: str
    cluster: str = ""
    touched: tuple[DrsTouch, ...] = ()
    unresolved: int = 0


@dataclass(frozen=True)
class Operation:
    """One thing the workload (a user, an admin, a controller) did."""

    t: float
    kind: str
    detail: str
    ok: bool = True


@dataclass(frozen=True)
class Fault:
    """One injected fault, from its start to its end (when it was healed)."""

    start: float
    end: float
    kind: str
    target: str


@dataclass(frozen=True)
class Agreement:
    """One probe of an install during the run: whether each path agreed with vCenter then
    (its node labels; its topology KV; its DRS rules with the planner's run on its pods; and
    no pod violating required host anti-affinity while a host is free for it)."""

    t: float
    labels: bool
    kv: bool
    drs: bool
    repaired: bool


@dataclass(frozen=True)
class ProcessExit:
    """A service process that ended: killed by the campaign, stepped down, or crashed."""

    t: float
    replica: str
    identity: str
    code: int
    by_campaign: bool
    lost_lease: bool
    log_tail: str = ""


@dataclass(frozen=True)
class EventsRead:
    """What one release's CLI read of the event stream: the event ids, or its error."""

    ids: frozenset[str] = frozenset()
    error: str = ""


@dataclass(frozen=True)
class Instance:
    """One process of a replica: its Lease identity, the service (Lease) it competes for and
    whether it ran the previous release."""

    identity: str
    replica: str
    service: str
    started: float
    previous_release: bool = False  # the release this tree upgrades from (the upgrade fault)


@dataclass(frozen=True)
class AdmissionCall:
    """One call the API double made to the admission webhook for a pod created through it:
    the pod as sent, as admitted, and the outcome (`patched`, `allowed`, `failed: ...`)."""

    t: float
    pod: str  # namespace/name, or namespace/generateName for a generated name
    outcome: str
    sent: dict[str, Any]
    admitted: dict[str, Any]


@dataclass(frozen=True)
class ExtenderFilter:
    """One /filter call the workload's scheduler made, with what it knew then: the nodes and
    the bound pods (API objects), the names it offered and what the extender passed."""

    t: float
    pod: dict[str, Any]
    offered: tuple[str, ...]
    passed: tuple[str, ...] | None  # None: the extender answered an error (skipped)
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]


@dataclass
class FinalState:
    """The world after the quiet period, read from vCenter, the double and the bus."""

    # node -> its labels; node -> the KV's host moid (None: no key); node VM -> (host moid,
    # host label value) as vCenter has it.
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    kv_hosts: dict[str, str | None] = field(default_factory=dict)
    vm_hosts: dict[str, tuple[str, str]] = field(default_factory=dict)
    schedulable: set[str] = field(default_factory=set)
    pods: list[dict[str, Any]] = field(default_factory=list)
    # cluster moid -> name -> fields of every DRS rule and group there.
    drs: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # cluster moid -> name -> (vms, hosts) of what the planner wants from the final pods; and
    # the names it holds back (conflicts: left as vCenter has them).
    planned: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = field(
        default_factory=dict
    )
    held: dict[str, set[str]] = field(default_factory=dict)
    # (cluster moid, rule name) -> fields, as the admin last set them.
    admin_rules: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    readiness: dict[str, bool] = field(default_factory=dict)
    # The Kubernetes Events in the double at the end (the services' reports).
    kube_events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class History:
    """Everything one install saw during a campaign; the first install's also holds the
    others' (`others`) and what was done in vCenter (its operations)."""

    seed: int = 0
    # The install's name in the campaign ("a", "b") and its token, the `<install>` of its DRS
    # names (`hostaffinity.schema.install_token` of its cluster identity).
    name: str = "a"
    install: str = ""
    # When every replica first answered ready: before it the system is still starting.
    ready_at: float = 0.0
    lease_duration_s: float = 2.0
    cooldown_s: float = 0.0
    requests: list[ApiRequest] = field(default_factory=list)
    changes: list[StoredChange] = field(default_factory=list)
    vcenter_writes: list[VcenterWrite] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    exits: list[ProcessExit] = field(default_factory=list)
    instances: dict[str, Instance] = field(default_factory=dict)
    # The event stream as `cli` read it, oldest first: (stream sequence, decoded event).
    events: list[tuple[int, Any]] = field(default_factory=list)
    # With the upgrade fault: the event ids each release's `hostaffinity events` read from the
    # stream after the final state was read (or why it could not), by release.
    events_read: dict[str, EventsRead] = field(default_factory=dict)
    # When vcsim last came back from a restart (its DRS state starts empty then).
    vcsim_restarts: list[float] = field(default_factory=list)
    admissions: list[AdmissionCall] = field(default_factory=list)
    extender_filters: list[ExtenderFilter] = field(default_factory=list)
    # The 1 s probe of labels, KV, DRS rules and repairs against vCenter (probe.py).
    agreements: list[Agreement] = field(default_factory=list)
    final: FinalState = field(default_factory=FinalState)
    others: list[History] = field(default_factory=list)

    @property
    def installs(self) -> list[History]:
        """This install's history and the others'."""
        return [self, *self.others]

    def lease_changes(self, service: str) -> list[StoredChange]:
        """Every committed write of the service's Lease, in order."""
        name = f"hostaffinity-{service}"
        return [
            c
            for c in self.changes
            if c.obj.get("kind") == "Lease" and c.obj["metadata"]["name"] == name
        ]

    def around(self, t: float, seconds: float = 5.0) -> list[str]:
        """One line per recorded thing within `seconds` of `t`, in time order."""
        lines: list[tuple[float, str]] = []
        lines += [(f.start, f"fault {f.kind} on {f.target} until {f.end:.1f}") for f in self.faults]
        lines += [
            (o.t, f"op {o.kind} {o.detail}{'' if o.ok else ' (failed)'}") for o in self.operations
        ]
        lines += [(r.t, f"api {r.actor} {r.method} {r.path} -> {r.status}") for r in self.requests]
        lines += [(w.t, f"vcenter {w.actor} {w.method}") for w in self.vcenter_writes]
        lines += [
            (c.t, f"store {c.actor} {c.type} {c.storage} {_name(c.obj)} rv={c.rv}")
            for c in self.changes
            if c.storage not in ("events",)
        ]
        lines += [(e.t, f"exit {e.replica} {e.identity} code={e.code}") for e in self.exits]
        return [f"{when:8.2f} {text}" for when, text in sorted(lines) if abs(when - t) <= seconds]


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))

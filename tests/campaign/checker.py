"""The invariants a campaign must leave standing, each a pure function of a `History`.

Every invariant holds for the first install; those that concern what the lean install runs too
(not its webhook's or extender's, which it has none of, nor the admin's rules, checked once) hold
for each other install, read from its own history; `installs_keep_to_their_own` holds across
them. Every check returns how many things it looked at and each breach with the time it
concerns, so a failing run can print the history around the first one.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import jsonpatch

from hostaffinity.admission_webhook.core.mutation import MutationSettings, plan_pod
from hostaffinity.admission_webhook.twinless import REASON as ADMITTED_WITHOUT_TWINS
from hostaffinity.affinity.engine import AffinityEngine, FilterMode
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import HOST_KEYS
from hostaffinity.affinity.model import decode_node, decode_pod
from hostaffinity.schema import (
    LABEL_ESXI_HOST,
    POD_PHYSICAL_ANTI_AFFINITY,
    DrsRulesApplied,
    NodeLabelled,
    PodEvicted,
    parse_drs_name,
)
from tests.campaign.history import (
    CAMPAIGN,
    RECONFIGURE,
    UNPARSED,
    ExtenderFilter,
    FinalState,
    History,
    StoredChange,
)

END = float("inf")  # the time of a breach found in the final state
HOSTNAME_KEY = "kubernetes.io/hostname"
WEBHOOK = "admission-webhook"
# The descheduler's Event on a violation no other node can resolve (reporting.py).
NO_NODE_EVENT = "NotDescheduled"
# How long what the scheduler knew must have been still before the extender must agree.
STABLE_S = 3.0


@dataclass(frozen=True)
class Breach:
    t: float
    message: str


@dataclass
class Result:
    name: str
    checked: int = 0
    install: str = ""  # the history's name it was checked on (all of them: the first's)
    breaches: list[Breach] = field(default_factory=list)

    def breach(self, t: float, message: str) -> None:
        self.breaches.append(Breach(t, message))


def labels_and_kv_match_vcenter(history: History) -> Result:
    """Every node's host label and KV value name its VM's host; no KV key outlives its node."""
    result = Result("labels-and-kv-match-vcenter")
    final = history.final
    for node, labels in sorted(final.node_labels.items()):
        result.checked += 1
        host_moid, host_label = final.vm_hosts.get(node, ("", ""))
        if labels.get(LABEL_ESXI_HOST) != host_label:
            result.breach(
                END, f"{node}: label {labels.get(LABEL_ESXI_HOST)!r}, vCenter {host_label!r}"
            )
        if final.kv_hosts.get(node) != host_moid:
            result.breach(END, f"{node}: KV {final.kv_hosts.get(node)!r}, vCenter {host_moid!r}")
    for node, moid in sorted(final.kv_hosts.items()):
        if node not in final.node_labels and moid is not None:
            result.breach(END, f"KV node.{node} ({moid}) outlives its node")
    return result


def drs_rules_match_pods(history: History) -> Result:
    """The DRS rules and groups named for the install are exactly what the planner makes of its
    final pods (with its topology and ownership records); another install's, told by the
    install in their names, are not its."""
    result = Result("drs-rules-match-pods")
    final = history.final
    for cluster in sorted(set(final.planned) | set(final.drs)):
        held = final.held.get(cluster, set())
        actual = {
            name: fields
            for name, fields in final.drs.get(cluster, {}).items()
            if _named_for(history.install, name) and name not in held
        }
        planned = {n: p for n, p in final.planned.get(cluster, {}).items() if n not in held}
        for name in sorted(set(actual) | set(planned)):
            result.checked += 1
            if name not in actual:
                result.breach(END, f"{cluster}: {name} planned but missing in vCenter")
            elif name not in planned:
                result.breach(END, f"{cluster}: {name} in vCenter but no pod asks for it")
            elif _members(actual[name]) != planned[name]:
                result.breach(
                    END,
                    f"{cluster}: {name} holds {_members(actual[name])}, planned {planned[name]}",
                )
    return result


def foreign_rules_untouched(history: History) -> Result:
    """Every rule the admin set is, field for field, what the admin last set."""
    result = Result("foreign-rules-untouched")
    for (cluster, name), fields in sorted(history.final.admin_rules.items()):
        result.checked += 1
        found = history.final.drs.get(cluster, {}).get(name)
        if found != fields:
            result.breach(END, f"{cluster}: admin rule {name} is {found}, the admin set {fields}")
    return result


def host_anti_affinity_held(history: History) -> Result:
    """No two replicas of a required host anti-affinity group (a host-key term, or an opted-in
    pod's hostname term read physically) share a host, unless no host with a schedulable node is
    free of that group: then nothing could take one, and the descheduler says so with an Event
    on one of the group's pods."""
    result = Result("host-anti-affinity-held")
    final = history.final
    for sharing in shared_hosts(final):
        result.checked += 1
        app, shared, free = sharing.app, sharing.shared, sharing.free
        if shared and free:
            result.breach(END, f"app {app}: {shared} share a host; free: {free}")
        elif shared and not any(
            e.get("reason") == NO_NODE_EVENT and e["involvedObject"]["name"].startswith(f"{app}-")
            for e in final.kube_events
        ):
            result.breach(END, f"app {app}: {shared} share a host and no Event says why")
    return result


@dataclass(frozen=True)
class Sharing:
    """One host anti-affinity group's bound pods: those sharing a host (host -> pod names) and
    the hosts with a schedulable node free of the group."""

    app: str
    shared: dict[str, list[str]]
    free: set[str]


def shared_hosts(final: FinalState) -> list[Sharing]:
    """Every host anti-affinity group of the bound pods, by app (what the invariant reads, and
    the run's probe of repairs: a violation is repaired when no group shares a host while a
    host is free)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in final.pods:
        if pod["metadata"].get("deletionTimestamp") or not pod["spec"].get("nodeName"):
            continue
        for app in _host_anti_affine_apps(pod):
            groups[app].append(pod)
    hosts_with_room = {final.vm_hosts[n][0] for n in final.schedulable if n in final.vm_hosts}
    found = []
    for app, pods in sorted(groups.items()):
        on_host: dict[str, list[str]] = defaultdict(list)
        for pod in pods:
            host = final.vm_hosts.get(pod["spec"]["nodeName"], ("", ""))[0]
            on_host[host].append(pod["metadata"]["name"])
        shared = {h: names for h, names in on_host.items() if len(names) > 1}
        found.append(Sharing(app, shared, hosts_with_room - set(on_host)))
    return found


def admission_as_the_webhook_plans(history: History) -> Result:
    """Every pod the double sent to the webhook was admitted exactly as the webhook's planner
    mutates it, or, when the call failed, as sent (failurePolicy Ignore); a call fails only
    while the system is starting (no webhook replica ready yet) or a webhook replica is being
    killed (its endpoint may still be listed for a moment)."""
    result = Result("admission-as-the-webhook-plans")
    settings = MutationSettings()
    for call in history.admissions:
        result.checked += 1
        if call.outcome.startswith("failed"):
            if call.t >= history.ready_at and not _webhook_disturbed(history, call.t):
                result.breach(call.t, f"{call.pod}: the webhook call {call.outcome}")
            if call.admitted != call.sent:
                result.breach(call.t, f"{call.pod}: admitted changed after a failed call")
            continue
        expected = jsonpatch.apply_patch(call.sent, plan_pod(call.sent, settings).operations)
        if call.outcome not in ("patched", "allowed") or call.admitted != expected:
            result.breach(call.t, f"{call.pod}: {call.outcome}, not what the planner makes of it")
    return result


def twinless_pods_reported(history: History) -> Result:
    """An opted-in pod that still lacks its host-key twin at the end (admitted while the webhook
    was away) has the webhook's AdmittedWithoutHostTerms Event."""
    result = Result("twinless-pods-reported")
    final = history.final
    reported = {
        (e["involvedObject"].get("namespace"), e["involvedObject"]["name"])
        for e in final.kube_events
        if e.get("reason") == ADMITTED_WITHOUT_TWINS
    }
    for pod in final.pods:
        meta = pod["metadata"]
        if (meta.get("annotations") or {}).get(POD_PHYSICAL_ANTI_AFFINITY) != "true":
            continue
        required = _required_anti_terms(pod)
        if not any(t.get("topologyKey") == HOSTNAME_KEY for t in required):
            continue
        result.checked += 1
        twinned = any(t.get("topologyKey") in HOST_KEYS for t in required)
        if not twinned and (meta.get("namespace"), meta["name"]) not in reported:
            result.breach(END, f"{_pod_name(pod)} has no host-key twin and no Event says so")
    return result


def extender_agrees_with_engine(history: History) -> Result:
    """Where what the scheduler knew at a /filter call was still within STABLE_S of it (no fault
    the extender suffers or that stalls its sources, no label change on the node's host, no pod
    bound to or leaving that host), the extender's answer is the engine's physical filter over
    that knowledge, in both directions:
    - every node the extender passed, the engine passes;
    - every node the engine passes, the extender passed, but for its one-host hold: a concerned
      pod is held on one ESXi host, so that pods scheduled after it see it before it is bound
      (scheduler_extender/core/answers.py, `reserved_host`); then the passed nodes are every
      node the engine passes on that one host, and only the other hosts' nodes are refused.
    A refusal on a host something moved on recently is excused, as a pass is: the extender's
    in-flight pods (passed, not yet bound) are not in the scheduler's snapshot."""
    result = Result("extender-agrees-with-engine")
    disturbed = [
        (f.start, f.end + STABLE_S)
        for f in history.faults
        if f.target.startswith("scheduler-extender")
        or f.kind in ("kill-nats", "restart-vcsim", "api-held", "api-slow", "api-500", "api-429")
    ]
    moves = _node_moves(history.changes)
    for call in history.extender_filters:
        if call.passed is None or any(start <= call.t <= end for start, end in disturbed):
            continue
        result.checked += 1
        expected = set(_engine_filter(call))
        host_of = {
            n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(LABEL_ESXI_HOST)
            for n in call.nodes
        }
        for node in sorted(set(call.passed) - expected):
            if _host_still(node, call.t, host_of, moves):
                result.breach(
                    call.t,
                    f"{_pod_name(call.pod)}: the extender passed {node} "
                    f"(host {host_of.get(node)}), which the engine refuses",
                )
        for node in sorted(_refused_beyond_the_hold(call.passed, expected, host_of)):
            if _host_still(node, call.t, host_of, moves):
                result.breach(
                    call.t,
                    f"{_pod_name(call.pod)}: the extender refused {node} "
                    f"(host {host_of.get(node)}), which the engine passes",
                )
    return result


def _host_still(
    node: str, t: float, host_of: dict[str, str | None], moves: dict[str, list[float]]
) -> bool:
    """Nothing moved on the node's host (a label change, a pod bound or leaving) within STABLE_S
    of `t`, before or after: the extender reads a vMotion from the topology KV, which the
    node-labeller writes before it patches the label the scheduler's snapshot shows."""
    host = host_of.get(node)
    neighbours = {n for n, h in host_of.items() if host is not None and h == host} | {node}
    return not any(abs(when - t) <= STABLE_S for n in neighbours for when in moves.get(n, ()))


def _refused_beyond_the_hold(
    passed: tuple[str, ...], expected: set[str], host_of: dict[str, str | None]
) -> set[str]:
    """The nodes the engine passes that the extender refused, less the other hosts' nodes when
    the answer is a one-host hold (every node it passed on one host, each the engine passes)."""
    refused = expected - set(passed)
    hosts = {host_of.get(node) for node in passed}
    if len(hosts) != 1 or None in hosts:
        return refused
    (held,) = hosts
    return {node for node in refused if host_of.get(node) == held}


def one_eviction_per_violation(history: History) -> Result:
    """A pod is evicted at most once, and a workload loses no second pod within the
    descheduler's cooldown (one violation, one eviction)."""
    result = Result("one-eviction-per-violation")
    owners = _pod_owners(history.changes)
    incarnations = _pod_incarnations(history.changes)
    per_pod: Counter[tuple[str, str]] = Counter()
    last_of_owner: dict[str, tuple[float, str, str]] = {}
    for request in _evictions(history):
        result.checked += 1
        pod = _evicted_pod(request.path)
        # A StatefulSet's replacement pod has its predecessor's name: count per uid.
        uid = _uid_at(incarnations.get(pod, []), request.t)
        per_pod[pod, uid] += 1
        if per_pod[pod, uid] > 1:
            result.breach(request.t, f"{pod} (uid {uid}) evicted again by {request.actor}")
        owner = owners.get(pod, pod)
        last = last_of_owner.get(owner)
        if last is not None and request.t - last[0] < history.cooldown_s:
            result.breach(
                request.t,
                f"{owner} lost {pod} within its cooldown ({request.actor}); "
                f"it lost {last[1]} at {last[0]:.2f} s ({last[2]})",
            )
        last_of_owner[owner] = (request.t, pod, request.actor)
    return result


def no_eviction_past_a_pdb(history: History) -> Result:
    """Every eviction charged the budget that covered its pod while it allowed one, and no
    service deleted a pod around the Eviction API."""
    result = Result("no-eviction-past-a-pdb")
    pdbs: dict[str, StoredChange] = {}
    for change in history.changes:
        if change.obj.get("kind") == "PodDisruptionBudget":
            pdbs[change.obj["metadata"]["name"]] = change
            continue
        if change.actor == CAMPAIGN or change.obj.get("kind") != "Pod":
            continue
        if change.type == "DELETED":
            result.breach(change.t, f"{change.actor} deleted pod {_pod_name(change.obj)}")
        if not _newly_disrupted(change):
            continue
        result.checked += 1
        labels = change.obj["metadata"].get("labels") or {}
        for pdb in pdbs.values():
            if not _selects(pdb.obj, labels):
                continue
            charged = pdb.actor == change.actor and _pod_name(change.obj).split("/")[1] in (
                (pdb.obj.get("status") or {}).get("disruptedPods") or {}
            )
            before = ((pdb.prev or {}).get("status") or {}).get("disruptionsAllowed", 0)
            if not charged or before <= 0:
                result.breach(
                    change.t,
                    f"{_pod_name(change.obj)} evicted by {change.actor} past PDB "
                    f"{pdb.obj['metadata']['name']} (allowed {before}, charged {charged})",
                )
    return result


def writes_only_by_the_leader(history: History) -> Result:
    """Every eviction and DRS reconfigure came from the holder of its service's Lease, inside
    the Lease's duration of its last committed renewal (from the double's Lease history)."""
    result = Result("writes-only-by-the-leader")
    writes = [(r.t, r.actor, f"eviction {r.path}") for r in _evictions(history, any_status=True)]
    writes += [(w.t, w.actor, w.method) for w in history.vcenter_writes if w.method == RECONFIGURE]
    leases: dict[str, list[StoredChange]] = {}
    for t, actor, what in sorted(writes):
        result.checked += 1
        instance = history.instances.get(actor)
        if instance is None:
            result.breach(t, f"{what} by an unknown instance {actor}")
            continue
        changes = leases.setdefault(instance.service, history.lease_changes(instance.service))
        last = next((c for c in reversed(changes) if c.t <= t), None)
        holder = (last.obj.get("spec") or {}).get("holderIdentity") if last else None
        if last is None or holder != actor:
            result.breach(
                t, f"{what} by {actor} ({instance.replica}) while {holder} held the Lease"
            )
        elif t - last.t > history.lease_duration_s:
            result.breach(
                t,
                f"{what} by {actor} ({instance.replica}) {t - last.t:.2f} s after its last renewal",
            )
    return result


def one_event_per_change(history: History) -> Result:
    """No event id is stored twice; every eviction has one `pod.evicted`, every label the
    labeller wrote a `node.labelled`, every DRS object named for the install a
    `drs.rules.applied` (on its own bus)."""
    result = Result("one-event-per-change")
    events = [event for _, event in history.events]
    for event_id, count in Counter(e.id for e in events).items():
        result.checked += 1
        if count > 1:
            result.breach(END, f"event {event_id} stored {count} times")
    evicted = Counter(
        e.pod_uid for e in events if isinstance(e, PodEvicted) and e.result == "evicted"
    )
    labelled = {
        (e.node, e.labels.get(LABEL_ESXI_HOST)) for e in events if isinstance(e, NodeLabelled)
    }
    for change in history.changes:
        if change.actor == CAMPAIGN:
            continue
        if change.obj.get("kind") == "Pod" and _newly_disrupted(change):
            result.checked += 1
            uid = change.obj["metadata"]["uid"]
            if evicted[uid] != 1:
                result.breach(
                    change.t, f"eviction of {_pod_name(change.obj)}: {evicted[uid]} pod.evicted"
                )
        if change.obj.get("kind") == "Node":
            value = (change.obj["metadata"].get("labels") or {}).get(LABEL_ESXI_HOST)
            old = ((change.prev or {}).get("metadata", {}).get("labels") or {}).get(LABEL_ESXI_HOST)
            if value != old and value is not None:
                result.checked += 1
                if (change.obj["metadata"]["name"], value) not in labelled:
                    result.breach(
                        change.t,
                        f"label {value} on {change.obj['metadata']['name']}: no node.labelled",
                    )
    announced: dict[str, set[str]] = defaultdict(set)
    for event in events:
        if isinstance(event, DrsRulesApplied) and not event.dry_run:
            announced[event.cluster_moid].update(event.added, event.edited)
    for cluster, objects in sorted(history.final.drs.items()):
        for name in sorted(n for n in objects if _named_for(history.install, n)):
            result.checked += 1
            if name not in announced[cluster]:
                result.breach(
                    END, f"{cluster}: {name} was written but no drs.rules.applied names it"
                )
    return result


def services_ready(history: History) -> Result:
    """Every replica answers /readyz 200 after the quiet period."""
    result = Result("services-ready")
    for replica, ready in sorted(history.final.readiness.items()):
        result.checked += 1
        if not ready:
            result.breach(END, f"{replica} is not ready")
    return result


def no_crash(history: History) -> Result:
    """A process ends only when the campaign kills it or when it loses its Lease (by design)."""
    result = Result("no-crash")
    for end in history.exits:
        result.checked += 1
        if not end.by_campaign and not end.lost_lease:
            result.breach(
                end.t, f"{end.replica} ({end.identity}) exited {end.code}:\n{end.log_tail}"
            )
    return result


def installs_keep_to_their_own(history: History) -> Result:
    """Whatever one install does, the others' DRS objects are theirs: no DRS reconfigure sent by
    an install's process adds, edits or removes a rule or group not named for that install
    (another install's, or an administrator's, even for a moment), and every name of
    hostaffinity's form in vCenter at the end is named for one of the installs. The exception:
    an install's process of the previous release writes the legacy names that release makes,
    and the install's new processes rename those in place (the upgrade fault)."""
    result = Result("installs-keep-to-their-own")
    installs = {each.install: each.name for each in history.installs}
    for each in history.installs:
        legacy = _legacy_made(each)
        for write in each.vcenter_writes:
            for touch in write.touched:
                result.checked += 1
                if touch.op == UNPARSED:
                    result.breach(write.t, f"{write.actor} sent a reconfigure: {touch.name}")
                elif not _named_for(each.install, touch.name) and not _its_legacy(
                    each, write.actor, touch.name, legacy
                ):
                    result.breach(
                        write.t,
                        f"{write.actor} (install {each.name}) sent {touch.op} of "
                        f"{_whose(touch.name, installs)} {touch.name!r} in {write.cluster}",
                    )
    for cluster, objects in sorted(history.final.drs.items()):
        for name in sorted(objects):
            parsed = parse_drs_name(name)
            if parsed is None:
                continue
            result.checked += 1
            if parsed.install not in installs:
                result.breach(END, f"{cluster}: {name} is named for no install of the campaign")
    return result


# The DRS objects that hold VMs apart or together (the groups only name their members).
RULE_KINDS: Final = ("vm-anti-affinity", "vm-affinity", "vm-host")


def legacy_rules_renamed_without_a_gap(history: History) -> Result:
    """Every DRS rule the install's previous release made (a legacy name) is, once this tree's
    processes take over, renamed in place by an edit: never removed and added again, so its VMs
    are held apart by a rule at every moment of the upgrade. A leftover legacy name at the end
    is caught by installs-keep-to-their-own (named for no install)."""
    result = Result("legacy-rules-renamed-without-a-gap")
    legacy = _legacy_made(history)
    for write in history.vcenter_writes:
        if _by_previous_release(history, write.actor):
            continue
        for touch in write.touched:
            parsed = parse_drs_name(touch.name)
            if touch.name not in legacy or parsed is None or parsed.kind not in RULE_KINDS:
                continue
            result.checked += 1
            if touch.op == "remove":
                result.breach(
                    write.t,
                    f"{write.actor} removed the previous release's rule {touch.name!r} in "
                    f"{write.cluster} instead of renaming it: its VMs were left without a rule",
                )
    return result


def events_read_by_both_releases(history: History) -> Result:
    """After an upgrade, the previous release's CLI and this tree's each read every event of the
    stream, whichever release wrote it (the old schema's readers skip no new event, and the new
    ones none of the old)."""
    result = Result("events-read-by-both-releases")
    stored = {event.id for _, event in history.events}
    for release, read in sorted(history.events_read.items()):
        result.checked += 1
        if read.error:
            result.breach(END, f"the {release} CLI could not read the events: {read.error}")
        elif missing := stored - read.ids:
            result.breach(
                END, f"the {release} CLI did not read {len(missing)} events: {sorted(missing)[:5]}"
            )
    return result


INVARIANTS: tuple[Callable[[History], Result], ...] = (
    labels_and_kv_match_vcenter,
    drs_rules_match_pods,
    foreign_rules_untouched,
    host_anti_affinity_held,
    admission_as_the_webhook_plans,
    twinless_pods_reported,
    extender_agrees_with_engine,
    one_eviction_per_violation,
    no_eviction_past_a_pdb,
    writes_only_by_the_leader,
    one_event_per_change,
    services_ready,
    no_crash,
    installs_keep_to_their_own,
    legacy_rules_renamed_without_a_gap,
    events_read_by_both_releases,
)
# What each other install is checked on: all but the admission webhook's and the extender's
# (the lean install runs neither), the admin's rules (the same for all: checked once) and the
# one across installs.
PER_INSTALL: tuple[Callable[[History], Result], ...] = tuple(
    invariant
    for invariant in INVARIANTS
    if invariant
    not in (
        foreign_rules_untouched,
        admission_as_the_webhook_plans,
        twinless_pods_reported,
        extender_agrees_with_engine,
        installs_keep_to_their_own,
        # The upgrade fault upgrades the first install alone.
        legacy_rules_renamed_without_a_gap,
        events_read_by_both_releases,
    )
)


def check(history: History) -> list[Result]:
    """Every invariant on the first install's history, PER_INSTALL on each other's."""
    results = []
    for each, invariants in (
        (history, INVARIANTS),
        *((other, PER_INSTALL) for other in history.others),
    ):
        for invariant in invariants:
            result = invariant(each)
            result.install = each.name
            results.append(result)
    return results


def first_breach(results: Iterable[Result]) -> tuple[Result, Breach] | None:
    """The earliest breach of all (final-state breaches last), with its invariant."""
    found = [(b.t, index, r, b) for index, r in enumerate(results) for b in r.breaches]
    if not found:
        return None
    _, _, result, breach = min(found, key=lambda item: (item[0], item[1]))
    return result, breach


# -- reading the history ------------------------------------------------------------------------


def _named_for(install: str, name: str) -> bool:
    """Whether a DRS rule or group is named for the install (its token in the name)."""
    parsed = parse_drs_name(name)
    return parsed is not None and parsed.install == install


def _by_previous_release(history: History, actor: str) -> bool:
    """Whether the process that sent a write ran the previous release."""
    instance = history.instances.get(actor)
    return instance is not None and instance.previous_release


def _its_legacy(history: History, actor: str, name: str, legacy: set[str]) -> bool:
    """A legacy name written by the install's previous release, or one it made (renamed)."""
    parsed = parse_drs_name(name)
    if parsed is None or parsed.install is not None:
        return False
    return name in legacy or _by_previous_release(history, actor)


def _legacy_made(history: History) -> set[str]:
    """The legacy-named (no install) DRS objects the install's previous release added."""
    return {
        touch.name
        for write in history.vcenter_writes
        if _by_previous_release(history, write.actor)
        for touch in write.touched
        if touch.op == "add" and (parsed := parse_drs_name(touch.name)) and parsed.install is None
    }


def _whose(name: str, installs: dict[str, str]) -> str:
    """Who a DRS object's name says it belongs to: an install of the campaign, or not ours."""
    parsed = parse_drs_name(name)
    if parsed is None:
        return "the administrator's"
    if parsed.install in installs:
        return f"install {installs[parsed.install]}'s"
    return "an unknown install's"


def _members(fields: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(sorted(fields.get("vm") or ())), tuple(sorted(fields.get("host") or ()))


def _required_anti_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    anti = ((pod["spec"].get("affinity") or {}).get("podAntiAffinity")) or {}
    return list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or ())


def _host_anti_affine_apps(pod: dict[str, Any]) -> list[str]:
    """The apps a pod keeps off its host: host-key terms, and an opted-in pod's hostname ones."""
    opted_in = (pod["metadata"].get("annotations") or {}).get(POD_PHYSICAL_ANTI_AFFINITY) == "true"
    keys = HOST_KEYS | ({HOSTNAME_KEY} if opted_in else set())
    return sorted(
        {
            term["labelSelector"]["matchLabels"]["app"]
            for term in _required_anti_terms(pod)
            if term.get("topologyKey") in keys
            and "app" in ((term.get("labelSelector") or {}).get("matchLabels") or {})
        }
    )


def _webhook_disturbed(history: History, t: float) -> bool:
    """A webhook replica was being killed, or ended, around `t`."""
    return any(
        f.kind == "kill-replica" and f.target.startswith(WEBHOOK) and f.start - 2 <= t <= f.end + 1
        for f in history.faults
    ) or any(e.replica.startswith(WEBHOOK) and e.t - 2 <= t <= e.t + 1 for e in history.exits)


def _engine_filter(call: ExtenderFilter) -> list[str]:
    """The engine's physical filter (the extender's, unplaced nodes failing host terms) over
    what the scheduler knew at the call."""
    index = ClusterIndex()
    for node in call.nodes:
        index.upsert_node(decode_node(json.dumps(node)))
    for pod in call.pods:
        index.upsert_pod(decode_pod(json.dumps(pod)))
    engine = AffinityEngine(index, fail_unplaced=True)
    pod = decode_pod(json.dumps(call.pod))
    return engine.filter(pod, list(call.offered), mode=FilterMode.PHYSICAL).feasible


def _node_moves(changes: Iterable[StoredChange]) -> dict[str, list[float]]:
    """Node name -> when its host label changed or a pod was bound to it or left it."""
    moves: dict[str, list[float]] = defaultdict(list)
    for change in changes:
        kind = change.obj.get("kind")
        if kind == "Node":
            labels = change.obj["metadata"].get("labels") or {}
            before = ((change.prev or {}).get("metadata") or {}).get("labels") or {}
            if change.type != "MODIFIED" or labels.get(LABEL_ESXI_HOST) != before.get(
                LABEL_ESXI_HOST
            ):
                moves[change.obj["metadata"]["name"]].append(change.t)
        elif kind == "Pod":
            for obj in (change.obj, change.prev or {}):
                node = (obj.get("spec") or {}).get("nodeName")
                if node:
                    moves[node].append(change.t)
    return moves


def _evictions(history: History, *, any_status: bool = False) -> list[Any]:
    return [
        r
        for r in history.requests
        if r.actor != CAMPAIGN
        and r.method == "POST"
        and r.path.endswith("/eviction")
        and (any_status or r.status == 201)
    ]


def _evicted_pod(path: str) -> str:
    """`namespace/name` from /api/v1/namespaces/<ns>/pods/<name>/eviction."""
    parts = path.strip("/").split("/")
    return f"{parts[3]}/{parts[5]}"


def _pod_name(obj: dict[str, Any]) -> str:
    return f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"


def _pod_incarnations(changes: Iterable[StoredChange]) -> dict[str, list[tuple[float, str]]]:
    """`namespace/name` -> (when it was stored, its uid), in order: a name a StatefulSet reuses
    names several pods over time."""
    found: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for change in changes:
        if change.obj.get("kind") == "Pod":
            found[_pod_name(change.obj)].append((change.t, str(change.obj["metadata"].get("uid"))))
    return {name: sorted(held) for name, held in found.items()}


def _uid_at(incarnations: list[tuple[float, str]], t: float) -> str:
    """The uid the name held at `t` (the last one stored by then)."""
    held = [uid for when, uid in incarnations if when <= t]
    return held[-1] if held else "?"


def _pod_owners(changes: Iterable[StoredChange]) -> dict[str, str]:
    owners = {}
    for change in changes:
        if change.obj.get("kind") == "Pod":
            refs = change.obj["metadata"].get("ownerReferences") or [{}]
            owners[_pod_name(change.obj)] = str(refs[0].get("name", ""))
    return owners


def _disrupted(obj: dict[str, Any] | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "DisruptionTarget" for c in conditions)


def _newly_disrupted(change: StoredChange) -> bool:
    """The write the Eviction API makes first: the DisruptionTarget condition appears."""
    return _disrupted(change.obj) and not _disrupted(change.prev)


def _selects(pdb: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())

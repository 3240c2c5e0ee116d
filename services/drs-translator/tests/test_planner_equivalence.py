"""The planner, driven from the pods that carry terms, plans exactly what the reference plans by
visiting every pod (tests/platform/builders/drs_reference_planner.py), over generated clusters:
several vSphere clusters, a node of another vCenter and one without placement, namespaces
picked by name and by labels, required and preferred (anti-)affinity on every host key, node
affinity on hosts, topology spreads, hosts entering maintenance, pods finished, terminating or
not yet assigned; and the pods the translator keeps for the plan, through pods created, updated
and deleted; and a plan made in steps with the inputs changing between them."""

from typing import Any, get_args

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.interpod import HOSTNAME_KEY, PhysicalAntiAffinity
from hostaffinity.affinity.model import Namespace, ObjectMeta, Pod
from hostaffinity.drs_translator.core.plan import Plan, PlannerSettings
from hostaffinity.drs_translator.core.planner import Planning, asks_for_placement, plan
from hostaffinity.drs_translator.metrics import DrsMetrics
from hostaffinity.drs_translator.translator import DrsTranslator
from hostaffinity.runtime.bus.kv import HostChange, NodeChange
from hostaffinity.schema import LABEL_ESXI_HOST, LABEL_LEGACY_HOST, POD_PHYSICAL_ANTI_AFFINITY
from tests.platform.builders.drs import INSTALL, VCENTER, host, placement, pod
from tests.platform.builders.drs_reference_planner import reference_plan

# node1-6 in domain-c1 over h0-h2, node7-8 in domain-c2 over h3-h4, node9 in another vCenter,
# node10 without a placement.
PLACEMENTS = {
    **{f"node{i}": placement(f"node{i}", f"vm{i}", f"h{(i - 1) % 3}") for i in range(1, 7)},
    **{f"node{i}": placement(f"node{i}", f"vm{i}", f"h{i - 4}", "domain-c2") for i in (7, 8)},
    "node9": msgspec.structs.replace(placement("node9", "vm9", "h0"), vcenter="elsewhere"),
}
NODES = [*PLACEMENTS, "node10", ""]
HOSTS = {f"h{i}": host(f"h{i}", "domain-c1" if i < 3 else "domain-c2") for i in range(5)}
SETTINGS = PlannerSettings(vcenter=VCENTER, install=INSTALL)
NAMESPACES = {"default": {}, "a": {"team": "x"}, "b": {"team": "y"}}
APPS = ("a", "b", "c")
ZONE = "topology.kubernetes.io/zone"
SCOPES: tuple[dict[str, Any], ...] = (
    {},
    {"namespaces": ["a"]},
    {"namespaceSelector": {}},
    {"namespaceSelector": {"matchLabels": {"team": "x"}}},
)

pod_specs = st.fixed_dictionaries(
    {
        "node": st.sampled_from(NODES),
        "namespace": st.sampled_from((*NAMESPACES, "unknown")),
        "app": st.sampled_from(APPS),
        "anti": st.one_of(
            st.none(),
            st.tuples(
                st.booleans(),  # required
                st.sampled_from(APPS),
                st.sampled_from([LABEL_ESXI_HOST, LABEL_LEGACY_HOST, HOSTNAME_KEY, ZONE]),
                st.sampled_from(SCOPES),
            ),
        ),
        "near": st.one_of(st.none(), st.tuples(st.booleans(), st.sampled_from(APPS))),
        "on_hosts": st.lists(st.sampled_from(["h0", "h1", "h2", "h3", "h4", "hx"]), max_size=2),
        "spread": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "maxSkew": st.sampled_from([1, 2]),
                    "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]),
                }
            ),
        ),
        "physical": st.booleans(),
        "state": st.sampled_from(["running", "running", "Failed", "terminating"]),
    }
)


def build(i: int, spec: dict[str, Any]) -> Pod:
    anti, near = spec["anti"], spec["near"]
    options: dict[str, Any] = {}
    if anti is not None:
        required, app, options["key"], scope = anti
        if required:
            options["apart_from"], options["extra_term"] = {"app": app}, scope
        else:
            options["preferred_apart_from"] = {"app": app}
    if near is not None:
        options["near" if near[0] else "preferred_near"] = {"app": near[1]}
    annotations = {POD_PHYSICAL_ANTI_AFFINITY: "true"} if spec["physical"] else {}
    built = pod(
        f"p{i}",
        spec["node"],
        {"app": spec["app"]},
        namespace=spec["namespace"],
        on_hosts=spec["on_hosts"],
        spread=spec["spread"],
        annotations=annotations,
        **options,
    )
    if spec["state"] == "Failed":
        return msgspec.structs.replace(
            built, status=msgspec.structs.replace(built.status, phase="Failed")
        )
    if spec["state"] == "terminating":
        deleted = "2026-11-25T00:00:00Z"
        metadata = msgspec.structs.replace(built.metadata, deletion_timestamp=deleted)
        return msgspec.structs.replace(built, metadata=metadata)
    return built


def pod_events(translator: DrsTranslator, events: list[tuple[int, dict[str, Any] | None]]) -> None:
    """Pod p<i> created or updated to the spec, or deleted (None), as the informer says it."""
    for i, spec in events:
        if spec is None:
            for namespace in (*NAMESPACES, "unknown"):
                translator.remove_pod(f"{namespace}/p{i}")
        else:
            translator.upsert_pod(build(i, spec))


def comparable(result: Plan) -> tuple[object, ...]:
    """The whole plan; problems of pods by pod (the reference listed them in index order)."""
    untranslatable = sorted(result.untranslatable, key=lambda u: (u.pod, u.message))
    return result.clusters, result.conflicts, untranslatable


@settings(max_examples=400, deadline=None)
@given(
    st.lists(pod_specs, max_size=14),
    st.randoms(use_true_random=False),
    st.sets(st.sampled_from(["h0", "h1", "h3"])),
    st.sampled_from(get_args(PhysicalAntiAffinity)),
    st.booleans(),
    st.booleans(),
)
def test_the_planner_plans_what_visiting_every_pod_planned(
    specs: list[dict[str, Any]],
    rng: Any,
    entering: set[str],
    physical_anti_affinity: PhysicalAntiAffinity,
    translate_preferred: bool,
    vm_host_mandatory: bool,
) -> None:
    pods = [build(i, spec) for i, spec in enumerate(specs)]
    hosts = {
        f"h{i}": host(f"h{i}", "domain-c1" if i < 3 else "domain-c2", entering=f"h{i}" in entering)
        for i in range(5)
    }
    index = ClusterIndex(physical_anti_affinity=physical_anti_affinity)
    for name, labels in NAMESPACES.items():
        index.set_namespace(name, labels)
    for item in rng.sample(pods, len(pods)):
        index.upsert_pod(item)
    planner_settings = PlannerSettings(
        vcenter=VCENTER,
        install=INSTALL,
        translate_preferred=translate_preferred,
        vm_host_mandatory=vm_host_mandatory,
    )
    constrained = [p for p in rng.sample(pods, len(pods)) if asks_for_placement(p)]

    expected = reference_plan(index, PLACEMENTS, hosts, pods, planner_settings)
    assert comparable(plan(index, PLACEMENTS, hosts, constrained, planner_settings)) == comparable(
        expected
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.integers(0, 5), pod_specs),  # upsert pod p<i>: new, or an update
            st.tuples(st.integers(0, 5), st.none()),  # remove pod p<i>
        ),
        max_size=20,
    ),
    st.booleans(),
)
def test_the_pods_the_translator_keeps_for_the_plan_plan_what_all_its_pods_plan(
    events: list[tuple[int, dict[str, Any] | None]], translate_preferred: bool
) -> None:
    translator = DrsTranslator([], None, DrsMetrics())
    for name, labels in NAMESPACES.items():
        translator.upsert_namespace(Namespace(metadata=ObjectMeta(name=name, labels=labels)))
    pod_events(translator, events)
    planner_settings = PlannerSettings(
        vcenter=VCENTER, install=INSTALL, translate_preferred=translate_preferred
    )

    kept = plan(
        translator.index, PLACEMENTS, HOSTS, translator.constrained.values(), planner_settings
    )
    every_pod = reference_plan(
        translator.index, PLACEMENTS, HOSTS, translator.pods.values(), planner_settings
    )
    assert comparable(kept) == comparable(every_pod)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), pod_specs), max_size=12),
    st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), pod_specs)), max_size=8),
    st.sampled_from([*PLACEMENTS, None]),
)
def test_what_changes_between_the_steps_of_a_plan_changes_nothing_in_it(
    pods: list[tuple[int, dict[str, Any]]],
    meanwhile: list[tuple[int, dict[str, Any] | None]],
    moved_node: str | None,
) -> None:
    """The translator lets its informers run between the steps of a plan: the plan stays the
    plan of the state it was begun on."""
    translator = DrsTranslator([], None, DrsMetrics())
    for name, labels in NAMESPACES.items():
        translator.upsert_namespace(Namespace(metadata=ObjectMeta(name=name, labels=labels)))
    for moid, esxi in HOSTS.items():
        translator.on_topology(HostChange(moid=moid, host=esxi, revision=1))
    for node, where in PLACEMENTS.items():
        translator.on_topology(NodeChange(node=node, placement=where, revision=1))
    for i, spec in pods:
        translator.upsert_pod(build(i, spec))
    inputs = (translator.index, translator.placements, translator.hosts)
    before = plan(*inputs, translator.constrained.values(), SETTINGS)

    planning = Planning(*inputs, translator.constrained.values(), SETTINGS)  # then informers run
    pod_events(translator, meanwhile)
    if moved_node is not None:
        translator.on_topology(NodeChange(node=moved_node, placement=None, revision=2))
    translator.on_topology(HostChange(moid="h1", host=None, revision=2))
    translator.on_topology(HostChange(moid="h3", host=None, revision=2))
    for _ in planning.steps():  # and a pod goes between each step
        for key in list(translator.pods)[:1]:
            translator.remove_pod(key)
    assert comparable(planning.result) == comparable(before)

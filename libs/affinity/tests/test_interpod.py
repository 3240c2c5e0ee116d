"""Inter-pod affinity and anti-affinity, the physical domain, and scoring.

Ids name the upstream file and case: pkg/scheduler/framework/plugins/interpodaffinity/
filtering_test.go and scoring_test.go (v1.36), or the hostaffinity rule being pinned.
"""

from __future__ import annotations

from typing import Any

import pytest

from hostaffinity.affinity.engine import FilterMode
from hostaffinity.affinity.explain import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
    REASON_UNPLACED,
)
from hostaffinity.affinity.interpod import PhysicalAntiAffinity
from hostaffinity.affinity.model import Pod
from hostaffinity.schema.names import LABEL_ESXI_HOST, POD_PHYSICAL_ANTI_AFFINITY
from tests.platform.builders.affinity import engine, expr, node, pod, preferred, required, term

SINGLE = "filtering_test.go:TestRequiredAffinitySingleNode/"
NODE1 = node("node1", {"region": "r1", "zone": "z11"})
SERVICE = {"service": "securityscan"}
SECURITY = {"security": "S1"}
EXISTING = pod("existing", labels=SERVICE, node_name="node1")


def sel(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(expressions)}


def merged(*parts: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for part in parts:
        result.update(part)
    return result


IN_SERVICE = sel(expr("service", "In", "securityscan", "value2"))
SINGLE_NODE_CASES = [
    pytest.param(
        pod(labels=SECURITY, affinity=required("podAffinity", term("region", IN_SERVICE))),
        [EXISTING],
        None,
        id=SINGLE + "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity "
        "using In operator that matches the existing pod",
    ),
    pytest.param(
        pod(
            labels=SECURITY,
            affinity=required(
                "podAffinity",
                term("region", sel(expr("service", "NotIn", "securityscan3", "value3"))),
            ),
        ),
        [EXISTING],
        None,
        id=SINGLE + "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in "
        "PodAffinity using not in operator in labelSelector that matches the existing pod",
    ),
    pytest.param(
        pod(
            labels=SECURITY,
            affinity=required("podAffinity", term("", IN_SERVICE, namespaces=["DiffNameSpace"])),
        ),
        [pod("existing", "ns", SERVICE, "node1")],
        REASON_AFFINITY,
        id=SINGLE + "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
    ),
    pytest.param(
        pod(
            labels=SERVICE,
            affinity=required(
                "podAffinity", term("", sel(expr("service", "In", "antivirusscan", "value2")))
            ),
        ),
        [EXISTING],
        REASON_AFFINITY,
        id=SINGLE + "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the "
        "existing pod",
    ),
    pytest.param(
        pod(
            labels=SECURITY,
            affinity=required(
                "podAffinity",
                term("region", sel(expr("service", "Exists"), expr("wrongkey", "DoesNotExist"))),
                term(
                    "region",
                    sel(
                        expr("service", "In", "securityscan"),
                        expr("service", "NotIn", "WrongValue"),
                    ),
                ),
            ),
        ),
        [EXISTING],
        None,
        id=SINGLE + "satisfies the PodAffinity with different label Operators in multiple "
        "RequiredDuringSchedulingIgnoredDuringExecution ",
    ),
    pytest.param(
        pod(
            labels=SECURITY,
            affinity=required(
                "podAffinity",
                term("region", sel(expr("service", "Exists"), expr("wrongkey", "DoesNotExist"))),
                term("region", sel(expr("service", "In", "securityscan2"))),
            ),
        ),
        [EXISTING],
        REASON_AFFINITY,
        id=SINGLE + "The labelSelector requirements(items of matchExpressions) are ANDed, the pod "
        "cannot schedule onto the node because one of the matchExpression item don't match.",
    ),
    pytest.param(
        pod(
            labels=SECURITY,
            affinity=merged(
                required("podAffinity", term("region", IN_SERVICE)),
                required(
                    "podAntiAffinity",
                    term("node", sel(expr("service", "In", "antivirusscan", "value2"))),
                ),
            ),
        ),
        [EXISTING],
        None,
        id=SINGLE + "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
    ),
    pytest.param(
        pod(
            labels=SECURITY,
            affinity=merged(
                required("podAffinity", term("region", IN_SERVICE)),
                required("podAntiAffinity", term("zone", IN_SERVICE)),
            ),
        ),
        [EXISTING],
        REASON_ANTI_AFFINITY,
        id=SINGLE + "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the "
        "existing pod",
    ),
    pytest.param(
        pod(
            labels=SERVICE,
            affinity=merged(
                required("podAffinity", term("region", IN_SERVICE)),
                required(
                    "podAntiAffinity",
                    term("node", sel(expr("service", "In", "antivirusscan", "value2"))),
                ),
            ),
        ),
        [
            pod(
                "existing",
                labels=SERVICE,
                node_name="node1",
                affinity=required("podAntiAffinity", term("zone", IN_SERVICE)),
            )
        ],
        REASON_EXISTING_ANTI_AFFINITY,
        id=SINGLE + "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy "
        "PodAntiAffinity symmetry with the existing pod",
    ),
    pytest.param(
        pod(
            labels=SERVICE,
            affinity=required(
                "podAffinity",
                term("region", sel(expr("service", "NotIn", "securityscan", "value2"))),
            ),
        ),
        [pod("existing", labels=SERVICE, node_name="node2")],
        REASON_AFFINITY,
        id=SINGLE + "pod matches its own Label in PodAffinity and that matches the existing pod "
        "Labels",
    ),
    pytest.param(
        pod(labels=SERVICE),
        [
            pod(
                "existing",
                labels=SERVICE,
                node_name="node1",
                affinity=required("podAntiAffinity", term("zone", IN_SERVICE)),
            )
        ],
        REASON_EXISTING_ANTI_AFFINITY,
        id=SINGLE + "verify that PodAntiAffinity from existing pod is respected when pod has no "
        "AntiAffinity constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
    ),
    pytest.param(
        pod(labels=SERVICE),
        [
            pod(
                "existing",
                labels=SERVICE,
                node_name="node1",
                affinity=required(
                    "podAntiAffinity",
                    term("zone", sel(expr("service", "NotIn", "securityscan", "value2"))),
                ),
            )
        ],
        None,
        id=SINGLE + "verify that PodAntiAffinity from existing pod is respected when pod has no "
        "AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
    ),
    pytest.param(
        pod(
            labels=SERVICE,
            affinity=required(
                "podAntiAffinity",
                term("region", sel(expr("service", "Exists"))),
                term("region", sel(expr("security", "Exists"))),
            ),
        ),
        [
            pod(
                "existing",
                labels=SECURITY,
                node_name="node1",
                affinity=required("podAntiAffinity", term("zone", sel(expr("security", "Exists")))),
            )
        ],
        REASON_ANTI_AFFINITY,
        id=SINGLE + "satisfies the PodAntiAffinity with existing pod but doesn't satisfy "
        "PodAntiAffinity symmetry with incoming pod",
    ),
    pytest.param(
        pod(
            labels=SECURITY,
            affinity=required("podAntiAffinity", term("zone", sel(expr("security", "Exists")))),
        ),
        [
            pod(
                "existing",
                labels=SERVICE,
                node_name="node1",
                affinity=required(
                    "podAntiAffinity",
                    term("zone", sel(expr("service", "Exists"))),
                    term("zone", sel(expr("security", "Exists"))),
                ),
            )
        ],
        REASON_EXISTING_ANTI_AFFINITY,
        id=SINGLE + "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially "
        "match each other on AffinityTerms",
    ),
    pytest.param(
        pod(
            labels=SERVICE,
            affinity=required("podAffinity", term("region", sel(expr("service", "Exists")))),
        ),
        [],
        None,
        id="filtering_test.go:TestRequiredAffinityMultipleNodes/A pod can be scheduled onto all "
        "the nodes that have the same topology key & label value with one of them has an existing "
        "pod that matches the affinity rules (first pod of a self-affine group)",
    ),
    pytest.param(
        pod(labels=SERVICE, affinity=required("podAffinity", term("rack", sel()))),
        [],
        REASON_AFFINITY,
        id="filtering.go:satisfyPodAffinity/a node missing the topology key fails even the first "
        "pod",
    ),
    pytest.param(
        pod(labels=SERVICE, affinity=required("podAffinity", term("region", None))),
        [EXISTING],
        REASON_AFFINITY,
        id="helpers.go:LabelSelectorAsSelector/a null labelSelector matches no pod",
    ),
]


@pytest.mark.parametrize(("incoming", "existing", "reason"), SINGLE_NODE_CASES)
def test_required_inter_pod_affinity(
    incoming: Pod, existing: list[Pod], reason: str | None
) -> None:
    cluster = engine([NODE1, node("node2", {"region": "r2", "zone": "z21"})], existing)
    result = cluster.filter(incoming, ["node1"])
    if reason is None:
        assert result.feasible == ["node1"]
    else:
        assert result.rejected["node1"].reason == reason


NS = {"team-a": {"team": "a"}, "team-b": {"team": "b"}, "bare": {}}
ANTI_APP = sel(expr("app", "In", "x"))


@pytest.mark.parametrize(
    ("extra", "forbidden"),
    [
        pytest.param({}, False, id="interpod:namespaces default to the pod's own"),
        pytest.param({"namespaceSelector": {}}, True, id="interpod:namespaceSelector {} is all"),
        pytest.param({"namespaceSelector": None}, False, id="interpod:null namespaceSelector"),
        pytest.param(
            {"namespaceSelector": {"matchLabels": {"team": "b"}}},
            True,
            id="interpod:namespaceSelector picks namespaces by label",
        ),
        pytest.param(
            {"namespaces": ["team-b"], "namespaceSelector": {"matchLabels": {"team": "c"}}},
            True,
            id="interpod:namespaces and namespaceSelector are ORed",
        ),
        pytest.param(
            {"namespaceSelector": sel(expr("team", "NotIn", "b"))},
            True,
            id="oracle README:a selector matching an empty label set selects every namespace",
        ),
    ],
)
def test_namespace_scope_of_incoming_terms(extra: dict[str, Any], forbidden: bool) -> None:
    existing = pod("x", "team-b", {"app": "x"}, "n1")
    incoming = pod(
        namespace="team-a", affinity=required("podAntiAffinity", term("zone", ANTI_APP, **extra))
    )
    cluster = engine([node("n1", {"zone": "z1"})], [existing], NS)
    assert (cluster.filter(incoming).feasible == []) is forbidden


def test_existing_terms_read_real_namespace_labels() -> None:
    """An existing pod's NotIn namespaceSelector does not get the incoming pod's quirk."""
    existing = pod(
        "x",
        "team-b",
        {"app": "x"},
        "n1",
        affinity=required(
            "podAntiAffinity",
            term(
                "zone",
                sel(expr("app", "Exists")),
                namespaceSelector=sel(expr("team", "NotIn", "a")),
            ),
        ),
    )
    cluster = engine([node("n1", {"zone": "z1"})], [existing], NS)
    assert cluster.filter(pod(namespace="team-a", labels={"app": "y"})).feasible == ["n1"]
    assert cluster.filter(pod(namespace="bare", labels={"app": "y"})).feasible == []


HOSTS = {"n1": "h1", "n2": "h1", "n3": "h2"}
PHYSICAL = "hostaffinity:physical domain/"


def vm(name: str, host_label: str | None = None) -> Any:
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "z1"}
    if host_label is not None:
        labels[LABEL_ESXI_HOST] = host_label
    return node(name, labels)


def replica(name: str, node_name: str, key: str, annotations: dict[str, str] | None = None) -> Pod:
    return pod(
        name,
        labels={"app": "web"},
        node_name=node_name,
        annotations=annotations,
        affinity=required("podAntiAffinity", term(key, {"matchLabels": {"app": "web"}})),
    )


def test_placement_wins_over_a_stale_host_label() -> None:
    """The VM of n3 moved to h1 before its label changed: a decision uses where it is now."""
    nodes = [vm("n1", "h1"), vm("n2", "h2"), vm("n3", "h2")]
    cluster = engine(nodes, [replica("web-0", "n1", LABEL_ESXI_HOST)], placement={"n3": "h1"})
    result = cluster.filter(replica("web-1", "", LABEL_ESXI_HOST))
    assert result.feasible == ["n2"]
    assert "h1" in result.rejected["n3"].message


def test_placement_update_moves_the_domain() -> None:
    nodes = [vm("n1", "h1"), vm("n2", "h1")]
    cluster = engine(nodes, [replica("web-0", "n1", LABEL_ESXI_HOST)])
    assert cluster.filter(replica("web-1", "", LABEL_ESXI_HOST)).feasible == []
    cluster.index.set_placement("n2", "h9")
    assert cluster.filter(replica("web-1", "", LABEL_ESXI_HOST)).feasible == ["n2"]


@pytest.mark.parametrize(
    ("physical_anti_affinity", "annotations", "feasible"),
    [
        pytest.param("opt-in", None, ["n2", "n3"], id=PHYSICAL + "hostname term reads as hostname"),
        pytest.param(
            "opt-in",
            {POD_PHYSICAL_ANTI_AFFINITY: "true"},
            ["n3"],
            id=PHYSICAL + "annotation opts one pod in",
        ),
        pytest.param("cluster-wide", None, ["n3"], id=PHYSICAL + "cluster-wide opt-in"),
        # "disabled" is never: the annotation is ignored, as the webhook ignores it.
        pytest.param(
            "disabled",
            {POD_PHYSICAL_ANTI_AFFINITY: "true"},
            ["n2", "n3"],
            id=PHYSICAL + "disabled ignores the annotation",
        ),
    ],
)
def test_physical_anti_affinity_opt_in(
    physical_anti_affinity: PhysicalAntiAffinity,
    annotations: dict[str, str] | None,
    feasible: list[str],
) -> None:
    nodes = [vm(n) for n in HOSTS]
    existing = replica("web-0", "n1", "kubernetes.io/hostname")
    cluster = engine(
        nodes, [existing], placement=HOSTS, physical_anti_affinity=physical_anti_affinity
    )
    incoming = replica("web-1", "", "kubernetes.io/hostname", annotations)
    result = cluster.filter(incoming)
    assert result.feasible == feasible
    if "n2" not in feasible:
        assert "physical reading of kubernetes.io/hostname" in result.rejected["n2"].message


def test_physical_mode_decides_only_host_terms() -> None:
    nodes = [vm(n) for n in HOSTS]
    existing = replica("web-0", "n1", LABEL_ESXI_HOST)
    cluster = engine(
        [*nodes, node("tainted", taints=[{"key": "k", "effect": "NoSchedule"}])],
        [existing],
        placement=HOSTS,
    )
    zone_rule = required("podAntiAffinity", term("topology.kubernetes.io/zone", sel()))
    incoming = replica("web-1", "", LABEL_ESXI_HOST)
    full = cluster.filter(incoming)
    physical = cluster.filter(incoming, mode=FilterMode.PHYSICAL)
    assert full.feasible == ["n3"]
    assert physical.feasible == ["n3", "tainted"]
    zoned = pod(affinity=zone_rule)
    assert cluster.filter(zoned, mode=FilterMode.PHYSICAL).feasible == [*HOSTS, "tainted"]


def test_unplaced_nodes_fail_host_terms_when_asked() -> None:
    nodes = [vm("n1"), vm("n2"), vm("n3")]
    existing = replica("web-0", "n1", LABEL_ESXI_HOST)
    placement = {"n1": "h1", "n2": "h2"}
    lenient = engine(nodes, [existing], placement=placement)
    strict = engine(nodes, [existing], placement=placement, fail_unplaced=True)
    incoming = replica("web-1", "", LABEL_ESXI_HOST)
    assert lenient.filter(incoming, mode=FilterMode.PHYSICAL).feasible == ["n2", "n3"]
    result = strict.filter(incoming, mode=FilterMode.PHYSICAL)
    assert result.feasible == ["n2"]
    assert result.rejected["n3"].reason == REASON_UNPLACED


def test_rejection_names_the_culprit_pod() -> None:
    cluster = engine([vm("n1", "h1")], [replica("web-0", "n1", LABEL_ESXI_HOST)])
    result = cluster.filter(pod(labels={"app": "web"}))
    assert "pod default/web-0 (on node n1)" in result.rejected["n1"].message
    assert result.summary() == (
        "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules."
    )


def test_a_pod_does_not_block_itself() -> None:
    """The descheduler asks about pods already placed: a pod's own record must not count."""
    placed = replica("web-0", "n1", LABEL_ESXI_HOST)
    cluster = engine([vm("n1", "h1"), vm("n2", "h1")], [placed])
    assert cluster.filter(placed).feasible == ["n1", "n2"]


SCORING = "scoring_test.go:TestPreferredAffinity/"


def test_preferred_affinity_scores_matching_domains() -> None:
    """SCORING 'Affinity: pod that matches topology key & pods in nodes will get high score
    comparing to others which doesn't match either pods in nodes or in topology key'."""
    nodes = [
        node("node1", {"region": "China"}),
        node("node2", {"region": "India"}),
        node("node3", {"az": "az1"}),
    ]
    existing = [pod("p1", labels={"security": "S1"}, node_name="node1")]
    rule = preferred("podAffinity", (5, term("region", sel(expr("security", "In", "S1")))))
    scores = engine(nodes, existing).score(pod(affinity=rule), ["node1", "node2", "node3"])
    assert [scores.scores[n].inter_pod_affinity for n in ("node1", "node2", "node3")] == [100, 0, 0]


def test_existing_pods_preferred_anti_affinity_lowers_score() -> None:
    """SCORING 'Anti Affinity: pod that does not match topology key & match the pods in nodes
    will get higher score comparing to others', from the existing pods' side (symmetry)."""
    nodes = [node("node1", {"region": "China"}), node("node2", {"region": "India"})]
    existing = [
        pod(
            "p1",
            labels={"security": "S2"},
            node_name="node1",
            affinity=preferred("podAntiAffinity", (10, term("region", sel(expr("app", "Exists"))))),
        )
    ]
    result = engine(nodes, existing).score(pod(labels={"app": "x"}), ["node1", "node2"])
    assert result.scores["node1"].inter_pod_affinity == 0
    assert result.scores["node2"].inter_pod_affinity == 100
    priorities = result.extender_priorities()
    assert priorities["node2"] > priorities["node1"]

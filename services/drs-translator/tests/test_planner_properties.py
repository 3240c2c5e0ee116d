"""Properties of the anti-affinity translation, against a brute-force reading of the same terms.

The brute force compiles each pod's terms with the affinity engine and checks every pod pair: a
VM pair must be apart exactly when some pod on one has a required host-level anti-affinity term
that selects a pod on the other.
"""

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from hostaffinity.affinity.interpod import compile_pod_terms
from hostaffinity.affinity.model import Pod
from hostaffinity.drs_translator.core.cliques import edge
from tests.platform.builders.drs import PLACEMENTS_6_3, pod, run_plan

APPS = ("a", "b", "c")
PLACEMENTS, HOSTS = PLACEMENTS_6_3

pod_specs = st.lists(
    st.tuples(
        st.integers(1, 6),  # node
        st.sampled_from(APPS),  # own app label
        st.one_of(st.none(), st.sampled_from(APPS)),  # app it must be apart from
    ),
    max_size=12,
)


def build(specs: list[tuple[int, str, str | None]]) -> list[Pod]:
    return [
        pod(f"p{i}", f"node{n}", {"app": app}, apart_from=None if avoid is None else {"app": avoid})
        for i, (n, app, avoid) in enumerate(specs)
    ]


def required_pairs(pods: list[Pod]) -> set[tuple[str, str]]:
    pairs = set()
    for p in pods:
        for term in compile_pod_terms(p).required_anti:
            for q in pods:
                if q is p or not term.matches(q.metadata.namespace, q.metadata.labels, {}):
                    continue
                a = PLACEMENTS[p.spec.node_name].vm_moid
                b = PLACEMENTS[q.spec.node_name].vm_moid
                if a != b:
                    pairs.add(edge(a, b))
    return pairs


def pairs_of(vms: tuple[str, ...]) -> set[tuple[str, str]]:
    return {edge(a, b) for a, b in combinations(vms, 2)}


@settings(max_examples=300, deadline=None)
@given(pod_specs)
def test_every_required_pair_is_covered_and_no_rule_separates_a_pair_that_did_not_ask(
    specs: list[tuple[int, str, str | None]],
) -> None:
    pods = build(specs)
    result = run_plan(pods, PLACEMENTS, HOSTS)
    planned = [o.vms for c in result.clusters.values() for o in c.objects.values()]
    held = [c.vms for c in result.conflicts]
    required = required_pairs(pods)
    covered: set[tuple[str, str]] = set()
    for vms in planned + held:
        assert len(vms) >= 2
        assert len(set(vms)) == len(vms)
        assert pairs_of(vms) <= required, f"{vms} separates a pair that did not ask"
        covered |= pairs_of(vms)
    assert required <= covered


@settings(max_examples=100, deadline=None)
@given(pod_specs)
def test_the_plan_does_not_depend_on_pod_order(specs: list[tuple[int, str, str | None]]) -> None:
    pods = build(specs)
    forward = run_plan(pods, PLACEMENTS, HOSTS)
    backward = run_plan(list(reversed(pods)), PLACEMENTS, HOSTS)
    assert {n: o for c in forward.clusters.values() for n, o in c.objects.items()} == {
        n: o for c in backward.clusters.values() for n, o in c.objects.items()
    }

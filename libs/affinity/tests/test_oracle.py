"""Every decision recorded from a real kube-scheduler v1.36.2 must be reproduced exactly.

Fixtures: tests/fixtures/kube-scheduler-oracle/ (see its README). The feasible set must match
exactly; the per-reason node counts of the scheduler's message, and how many rejections were
unresolvable (the nodes preemption calls "not helpful"), are compared too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hostaffinity.affinity.engine import AffinityEngine
from hostaffinity.affinity.explain import fit_error_message
from hostaffinity.affinity.index import ClusterIndex
from hostaffinity.affinity.model import Node, Pod
from tests.recorded_fixtures import fixture_files

CASES = fixture_files("kube-scheduler-oracle", "kso-*.json")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
NOT_HELPFUL = re.compile(r"(\d+) Preemption is not helpful for scheduling")


def build(case: dict[str, Any]) -> tuple[AffinityEngine, Pod]:
    """The cluster as the scheduler saw it, and the incoming pod as admitted."""
    index = ClusterIndex()
    for name in SYSTEM_NAMESPACES:
        index.set_namespace(name, {"kubernetes.io/metadata.name": name})
    for namespace in case["namespaces"]:
        name = namespace["name"]
        index.set_namespace(name, {**namespace["labels"], "kubernetes.io/metadata.name": name})
    for node in case["nodes"]:
        index.upsert_node(msgspec.convert(node, Node))
    for pod in case["existing_pods"]:
        index.upsert_pod(msgspec.convert(pod, Pod))
    incoming = {"metadata": case["pod"]["metadata"], "spec": case["pod_as_admitted"]}
    return AffinityEngine(index), msgspec.convert(incoming, Pod)


def test_all_fixtures_are_present() -> None:
    assert len(CASES) == 280


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_oracle(path: Path) -> None:
    case = json.loads(path.read_text())
    engine, pod = build(case)
    result = engine.filter(pod)
    assert sorted(result.feasible) == case["feasible"], result.rejected
    recorded = case["scheduler_message"]
    extra = [("oracle", len(result.feasible))]
    summary = fit_error_message(len(case["nodes"]), result.rejected, extra)
    assert summary == recorded.split(". ")[0] + "."
    found = NOT_HELPFUL.search(recorded)
    unresolvable = sum(r.unresolvable for r in result.rejected.values())
    assert unresolvable == (int(found.group(1)) if found else 0)

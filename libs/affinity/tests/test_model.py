"""Decoding API JSON, and the API server's matchLabelKeys merge, checked against the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from hostaffinity.affinity.interpod import apply_label_keys
from hostaffinity.affinity.model import Pod, decode_namespace, decode_node, decode_pod
from tests.recorded_fixtures import fixture_files

WITH_KEYS = [
    p for p in fixture_files("kube-scheduler-oracle", "kso-*.json") if "LabelKeys" in p.read_text()
]


def test_decode_ignores_unknown_fields_and_keeps_null_apart_from_empty() -> None:
    raw = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c"}],
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": "k", "namespaceSelector": {}, "labelSelector": None}
                        ]
                    }
                },
            },
            "status": {"phase": "Running", "podIP": "10.0.0.1"},
        }
    ).encode()
    pod = decode_pod(raw)
    assert pod.key == "ns/p"
    assert pod.spec.node_name == "n1"
    assert pod.spec.affinity is not None
    anti = pod.spec.affinity.pod_anti_affinity
    assert anti is not None
    (term,) = anti.required_during_scheduling_ignored_during_execution or []
    assert term.namespace_selector is not None
    assert term.label_selector is None


def test_decode_node_and_namespace() -> None:
    node = decode_node(
        b'{"metadata":{"name":"n1","labels":{"a":"b"}},'
        b'"spec":{"unschedulable":true,"taints":[{"key":"k","effect":"NoSchedule"}]}}'
    )
    assert node.spec.unschedulable
    assert node.spec.taints[0].value == ""
    assert decode_namespace(b'{"metadata":{"name":"ns","labels":{"x":"y"}}}').metadata.labels == {
        "x": "y"
    }


def test_the_oracle_has_its_label_keys_cases() -> None:
    assert len(WITH_KEYS) == 46


@pytest.mark.parametrize("path", WITH_KEYS, ids=[p.stem for p in WITH_KEYS])
def test_label_keys_merge_like_the_api_server(path: Path) -> None:
    case = json.loads(path.read_text())
    submitted = msgspec.convert(case["pod"], Pod)
    admitted = msgspec.convert({"spec": case["pod_as_admitted"]}, Pod)
    assert apply_label_keys(submitted).spec.affinity == admitted.spec.affinity

"""The double stores a created pod's affinity label keys as the real server does.

Recorded (tests/fixtures/kube-apiserver-admission/pod-create-review.json, kube-apiserver
v1.36.2): the pod as the webhook saw it, the webhook's patch, and the pod as stored. Created
through the double's HTTP with that patch applied, the stored affinity must be the recorded one
(matchLabelKeys merged into every selector, twins included). A double switched to a pre-v1.31
server (`merges_label_keys=False`) stores the same terms with both key lists dropped and nothing
merged (tests/platform/kube_double/label_keys.py says where each behaviour is in Kubernetes).
"""

import base64
import copy
import json
from typing import Any

import aiohttp
import jsonpatch
import pytest

from tests.platform.kube_double import KubeDouble
from tests.recorded_fixtures import fixture_dir

RECORDED = json.loads(
    (fixture_dir("kube-apiserver-admission") / "pod-create-review.json").read_text()
)


def admitted_pod() -> dict[str, Any]:
    """The recorded pod after the recorded webhook's patch: what reaches the pod strategy."""
    review = RECORDED["reviews"][0]
    sent = copy.deepcopy(review["request_body"]["request"]["object"])
    patch = json.loads(base64.b64decode(review["response_body"]["response"]["patch"]))
    admitted: dict[str, Any] = jsonpatch.apply_patch(sent, patch)
    admitted["metadata"]["name"] = "recorded"
    admitted["metadata"].pop("generateName", None)
    return admitted


def without_label_keys(affinity: dict[str, Any]) -> dict[str, Any]:
    """The admitted affinity with every term's matchLabelKeys / mismatchLabelKeys removed."""
    stripped = copy.deepcopy(affinity)
    for group in stripped.values():
        terms = list(group.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [w["podAffinityTerm"] for w in group.get(
            "preferredDuringSchedulingIgnoredDuringExecution") or []]  # fmt: skip
        for term in terms:
            term.pop("matchLabelKeys", None)
            term.pop("mismatchLabelKeys", None)
    return stripped


@pytest.mark.parametrize("merges", [True, False], ids=["v1.31-and-later", "before-v1.31"])
async def test_created_pod_label_keys_as_the_server_stores_them(merges: bool) -> None:
    double = KubeDouble(merges_label_keys=merges)
    await double.start()
    try:
        double.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}})
        pod = admitted_pod()
        url = f"{double.url}/api/v1/namespaces/apps/pods"
        headers = {"Authorization": f"Bearer {double.token}"}
        async with aiohttp.ClientSession() as http, http.post(url, json=pod, headers=headers) as r:
            assert r.status == 201, await r.text()
            stored = (await r.json())["spec"]["affinity"]
    finally:
        await double.stop()
    if merges:
        assert stored == RECORDED["stored_pod"]["spec"]["affinity"]
    else:
        assert stored == without_label_keys(pod["spec"]["affinity"])
        assert "matchExpressions" not in json.dumps(stored)

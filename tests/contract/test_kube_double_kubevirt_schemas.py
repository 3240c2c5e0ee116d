"""The double holds KubeVirt objects to KubeVirt's published CRD schemas (tests/fixtures/
kubevirt-crds, KubeVirt v1.9.0): what a real cluster with KubeVirt installed accepts it accepts,
and what such a cluster refuses with 422 it refuses with the same causes. The recorded 422 of a
VMI (kube-apiserver/10-kubevirt-vmi-and-migration.json) is replayed by the contract suite."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from tests.platform.kube_double import KubeDouble
from tests.platform.kube_double.errors import ApiError

NAMESPACE = "kv"
DOMAIN = {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}
VM_TEMPLATE = {"metadata": {"labels": {"app": "db"}}, "spec": {"domain": DOMAIN}}


def _object(api_version: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    metadata = {"name": name, "namespace": NAMESPACE}
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


# One object per kind as KubeVirt's user guide writes them, the path it is created at, and a
# variant the schema refuses with the causes a real server gives.
CASES: dict[str, tuple[dict[str, Any], str, Any, list[tuple[str, str]]]] = {
    "VirtualMachine": (
        _object("kubevirt.io/v1", "VirtualMachine", "db-0",
                {"runStrategy": "Always", "template": VM_TEMPLATE}),
        "/apis/kubevirt.io/v1/namespaces/kv/virtualmachines",
        lambda o: o["spec"].pop("template"),
        [("FieldValueRequired", "spec.template")],
    ),
    "VirtualMachineInstance": (
        _object("kubevirt.io/v1", "VirtualMachineInstance", "db-0", {"domain": DOMAIN}),
        "/apis/kubevirt.io/v1/namespaces/kv/virtualmachineinstances",
        lambda o: o["spec"]["domain"].update(devices={"disks": [{"bootOrder": "first"}]}),
        [("FieldValueTypeInvalid", "spec.domain.devices.disks[0].bootOrder"),
         ("FieldValueRequired", "spec.domain.devices.disks[0].name")],
    ),
    "VirtualMachineInstanceReplicaSet": (
        _object("kubevirt.io/v1", "VirtualMachineInstanceReplicaSet", "db",
                {"replicas": 3, "selector": {"matchLabels": {"app": "db"}},
                 "template": VM_TEMPLATE}),
        "/apis/kubevirt.io/v1/namespaces/kv/virtualmachineinstancereplicasets",
        lambda o: o["spec"].update(replicas="three"),
        [("FieldValueTypeInvalid", "spec.replicas")],
    ),
    "VirtualMachinePool": (
        _object("pool.kubevirt.io/v1beta1", "VirtualMachinePool", "db",
                {"replicas": 3, "selector": {"matchLabels": {"app": "db"}},
                 "virtualMachineTemplate": {"metadata": {"labels": {"app": "db"}},
                                            "spec": {"runStrategy": "Always",
                                                     "template": VM_TEMPLATE}}}),
        "/apis/pool.kubevirt.io/v1beta1/namespaces/kv/virtualmachinepools",
        lambda o: o["spec"].pop("selector"),
        [("FieldValueRequired", "spec.selector")],
    ),
    "VirtualMachineInstanceMigration": (
        _object("kubevirt.io/v1", "VirtualMachineInstanceMigration", "move-db-0",
                {"vmiName": "db-0", "addedNodeSelector": {"kubernetes.io/hostname": "node-2"}}),
        "/apis/kubevirt.io/v1/namespaces/kv/virtualmachineinstancemigrations",
        lambda o: o["spec"].update(addedNodeSelector={"kubernetes.io/hostname": 2}),
        [("FieldValueTypeInvalid", "spec.addedNodeSelector.kubernetes.io/hostname")],
    ),
    "KubeVirt": (
        _object("kubevirt.io/v1", "KubeVirt", "kubevirt",
                {"configuration": {"migrations": {"parallelMigrationsPerCluster": 5,
                                                  "parallelOutboundMigrationsPerNode": 2}}}),
        "/apis/kubevirt.io/v1/namespaces/kv/kubevirts",
        lambda o: o["spec"]["configuration"]["migrations"].update(
            parallelMigrationsPerCluster="five"),
        [("FieldValueTypeInvalid", "spec.configuration.migrations.parallelMigrationsPerCluster")],
    ),
}  # fmt: skip


async def _post(kube: KubeDouble, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {kube.token}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.post(kube.url + path, data=json.dumps(body)) as response,
    ):
        return response.status, await response.json()


@pytest.fixture
def kube(kube_double: KubeDouble) -> KubeDouble:
    kube_double.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return kube_double


@pytest.mark.parametrize("kind", list(CASES))
async def test_a_valid_object_is_created_and_a_schema_breaking_one_refused(
    kube: KubeDouble, kind: str
) -> None:
    valid, path, break_it, causes = CASES[kind]
    status, created = await _post(kube, path, valid)
    assert status == 201, created
    assert created["spec"] == valid["spec"]
    broken = json.loads(json.dumps(valid))
    broken["metadata"]["name"] += "-broken"
    break_it(broken)
    status, refused = await _post(kube, path, broken)
    assert (status, refused["reason"]) == (422, "Invalid")
    got = [(c["reason"], c["field"]) for c in refused["details"]["causes"] if c["field"] != "<nil>"]
    assert got == causes
    assert refused["details"]["kind"] == kind


def test_a_hand_made_object_that_breaks_the_schema_cannot_be_seeded(kube: KubeDouble) -> None:
    """Tests build KubeVirt objects by hand: the double refuses them as a cluster would."""
    vmi = _object("kubevirt.io/v1", "VirtualMachineInstance", "db-1", {})
    with pytest.raises(ApiError, match=r'"db-1" is invalid: \[spec.domain: Required value'):
        kube.seed(vmi)


async def test_a_merge_patch_that_breaks_the_schema_is_refused(kube: KubeDouble) -> None:
    valid, path, _, _ = CASES["VirtualMachineInstanceMigration"]
    status, _ = await _post(kube, path, valid)
    assert status == 201
    headers = {
        "Authorization": f"Bearer {kube.token}",
        "Content-Type": "application/merge-patch+json",
    }
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.patch(
            f"{kube.url}{path}/move-db-0", data=json.dumps({"spec": {"vmiName": ["db-0"]}})
        ) as response,
    ):
        assert response.status == 422
        body = await response.json()
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.vmiName"]

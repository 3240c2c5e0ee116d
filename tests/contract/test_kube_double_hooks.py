"""The double's test hooks that the recordings cannot exercise: held PATCHes, object faults
(held, slow, failing requests), held watch events and SA tokens."""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
import pytest

from tests.platform.kube_double import KubeDouble

PATCH = {"Content-Type": "application/strategic-merge-patch+json"}


async def test_held_patch_waits_until_released(kube_double: KubeDouble) -> None:
    kube_double.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"}})
    hold = kube_double.hold_patches("nodes", "worker-1")
    headers = {"Authorization": f"Bearer {kube_double.token}", **PATCH}
    body = json.dumps({"metadata": {"labels": {"held": "yes"}}})
    async with aiohttp.ClientSession(headers=headers) as session:
        sent = asyncio.create_task(
            session.patch(f"{kube_double.url}/api/v1/nodes/worker-1", data=body)
        )
        await asyncio.wait_for(hold.arrived.wait(), 5)
        node = kube_double.read("v1", "nodes", "worker-1")
        assert node is not None
        assert "held" not in (node["metadata"].get("labels") or {})
        hold.release()
        response = await asyncio.wait_for(sent, 5)
        assert response.status == 200
    node = kube_double.read("v1", "nodes", "worker-1")
    assert node is not None
    assert node["metadata"]["labels"]["held"] == "yes"


async def test_held_watch_events_arrive_in_order_once_released(kube_double: KubeDouble) -> None:
    headers = {"Authorization": f"Bearer {kube_double.token}"}
    url = f"{kube_double.url}/api/v1/namespaces?watch=true&resourceVersion={kube_double.store.rv}"
    async with aiohttp.ClientSession(headers=headers) as session, session.get(url) as watch:
        hold = kube_double.hold_watches("namespaces")
        for name in ("held-1", "held-2"):
            kube_double.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        await asyncio.wait_for(hold.arrived.wait(), 5)
        with contextlib.suppress(TimeoutError):
            line = await asyncio.wait_for(watch.content.readline(), 0.3)
            raise AssertionError(f"an event got through the hold: {line!r}")
        kube_double.release_watches("namespaces")
        names = [
            json.loads(await asyncio.wait_for(watch.content.readline(), 5))["object"]["metadata"][
                "name"
            ]
            for _ in range(2)
        ]
    assert names == ["held-1", "held-2"]


async def test_service_account_token_is_forbidden(kube_double: KubeDouble) -> None:
    kube_double.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "authz"}})
    token = kube_double.service_account_token("authz", "no-rbac")
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session,
        session.get(f"{kube_double.url}/api/v1/nodes") as response,
    ):
        body = await response.json()
    assert response.status == 403
    assert "system:serviceaccount:authz:no-rbac" in body["message"]


LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/held"


def _lease() -> dict[str, object]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "held", "namespace": "kube-system"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 2},
    }


async def test_object_fault_holds_every_verb_then_carries_it_out(kube_double: KubeDouble) -> None:
    kube_double.seed(_lease())
    fault = kube_double.fault("leases", "held", "kube-system")
    fault.hold()
    headers = {"Authorization": f"Bearer {kube_double.token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        sent = asyncio.create_task(session.get(kube_double.url + LEASE_PATH))
        await asyncio.sleep(0.3)
        assert not sent.done(), "a held GET waits"
        assert fault.requests == 1
        fault.release()
        response = await asyncio.wait_for(sent, 5)
        assert response.status == 200
        # Other objects of the kind are not affected.
        other = LEASE_PATH.replace("/held", "/other")
        async with session.get(kube_double.url + other) as missing:
            assert missing.status == 404


async def test_object_fault_answers_500_internal_error_like_the_server(
    kube_double: KubeDouble,
) -> None:
    kube_double.seed(_lease())
    fault = kube_double.fault("leases", "held", "kube-system")
    fault.failing = True
    headers = {"Authorization": f"Bearer {kube_double.token}"}
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.put(kube_double.url + LEASE_PATH, json=_lease()) as response,
    ):
        body = await response.json()
    assert response.status == 500
    # The shape of metav1.Status from NewInternalError (apimachinery/pkg/api/errors/errors.go);
    # the recorded watch ERROR in 02-watch-nodes-bookmarks.json has the same kind/reason/code.
    assert body["kind"] == "Status"
    assert body["status"] == "Failure"
    assert body["reason"] == "InternalError"
    assert body["code"] == 500
    assert body["message"].startswith("Internal error occurred: ")
    assert body["details"]["causes"][0]["message"] in body["message"]
    fault.clear()
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.get(kube_double.url + LEASE_PATH) as healthy,
    ):
        assert healthy.status == 200


async def test_a_killed_double_refuses_then_serves_the_same_store_on_the_same_port(
    kube_double: KubeDouble,
) -> None:
    """kill/revive stand for a SIGKILLed and restarted kube-apiserver over the same etcd."""
    seeded = kube_double.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w-1"}})
    url = kube_double.url
    headers = {"Authorization": f"Bearer {kube_double.token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        watch = await session.get(
            f"{url}/api/v1/nodes",
            params={"watch": "true", "resourceVersion": seeded["metadata"]["resourceVersion"]},
        )
        await kube_double.kill()
        assert await asyncio.wait_for(watch.content.read(), 5) == b"", "open watches end"
        watch.release()
        with pytest.raises(aiohttp.ClientConnectorError):
            await session.get(f"{url}/api/v1/nodes/w-1")

        await kube_double.revive()

        assert kube_double.url == url
        async with session.get(f"{url}/api/v1/nodes/w-1") as response:
            node = await response.json()
    assert response.status == 200
    assert node["metadata"]["resourceVersion"] == seeded["metadata"]["resourceVersion"]

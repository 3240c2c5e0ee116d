"""HealthServer: /healthz always, /readyz only when every part passes (a declared part not yet
registered fails; a vCenter's part is degraded while another vCenter is served), /metrics as
text, with each server's own readiness parts and gauges (alerts read them)."""

import functools

import aiohttp
import pytest

from hostaffinity.runtime.http.health import HealthServer


async def test_readiness_follows_the_checks() -> None:
    synced = False
    server = HealthServer("127.0.0.1", 0)
    server.add_readiness_check("nodes synced", lambda: synced)
    await server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/healthz") as response:
                assert response.status == 200
            async with http.get(base + "/readyz") as response:
                assert response.status == 503
                assert await response.text() == "not ready: nodes synced\n[-] nodes synced\n"
            synced = True
            async with http.get(base + "/readyz") as response:
                assert response.status == 200
                assert await response.text() == "ready\n[+] nodes synced\n"
            async with http.get(base + "/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain")
                assert "python_info" in await response.text()
    finally:
        await server.stop()


async def test_metrics_carry_this_servers_checks_and_gauges() -> None:
    """Two servers in one process (as the e2e tests run services) each report their own."""
    leading = 0.0
    first, second = HealthServer("127.0.0.1", 0), HealthServer("127.0.0.1", 0)
    first.add_readiness_check("nats connected", lambda: True)
    first.add_readiness_check("nodes synced", lambda: False)
    first.add_gauge("hostaffinity_leader", "leading or not", lambda: leading)
    await first.start()
    await second.start()
    try:
        async with aiohttp.ClientSession() as http:
            leading = 1.0
            async with http.get(f"http://127.0.0.1:{first.port}/metrics") as response:
                text = await response.text()
            async with http.get(f"http://127.0.0.1:{second.port}/metrics") as response:
                other = await response.text()
    finally:
        await first.stop()
        await second.stop()
    assert 'hostaffinity_readiness_check{check="nats connected"} 1.0' in text
    assert 'hostaffinity_readiness_check{check="nodes synced"} 0.0' in text
    assert "hostaffinity_leader 1.0" in text
    assert "python_info" in text
    assert "hostaffinity_leader" not in other
    assert 'check="nodes synced"' not in other


def test_a_declared_part_fails_until_it_is_registered() -> None:
    server = HealthServer("127.0.0.1", 0)
    server.add_readiness_check("nats connected", lambda: True)
    server.declare("webhook listening")
    assert server.not_ready() == ["webhook listening"]
    assert server.readiness().body() == (
        "not ready: webhook listening\n"
        "[+] nats connected\n"
        "[-] webhook listening: not registered yet\n"
    )
    server.add_readiness_check("webhook listening", lambda: True)
    server.declare("webhook listening")  # declaring again keeps the registered check
    assert server.readiness().ready


@pytest.mark.parametrize(
    ("up", "states"),
    [
        pytest.param({"vc-a", "vc-b"}, ["passes"] * 4, id="both-served"),
        pytest.param(
            {"vc-a"}, ["passes", "passes", "passes", "degraded"], id="one-away-is-degraded"
        ),
        pytest.param(set(), ["passes", "passes", "fails", "fails"], id="none-served-fails"),
    ],
)
def test_a_vcenter_part_is_degraded_while_another_vcenter_is_served(
    up: set[str], states: list[str]
) -> None:
    server = HealthServer("127.0.0.1", 0)
    for name in ("vc-a", "vc-b"):
        server.add_readiness_check(f"vcenter read: {name}", lambda: True)  # no unit: a gate
    for name in ("vc-a", "vc-b"):
        server.add_readiness_check(
            f"vcenter connected: {name}",
            functools.partial(set.__contains__, up, name),
            unit=name,
            detail=lambda: "refused",
        )
    readiness = server.readiness()
    assert [part.state for part in readiness.parts] == states
    assert readiness.ready is (bool(up))
    details = {part.detail for part in readiness.parts if part.state != "passes"}
    assert details <= {"refused"}


def test_with_one_vcenter_its_part_failing_fails() -> None:
    server = HealthServer("127.0.0.1", 0)
    server.add_readiness_check("vcenter connected: vc", lambda: False, unit="vc")
    assert server.readiness().failing == ["vcenter connected: vc"]

"""HealthServer: /healthz always, /readyz only when every check passes, /metrics as text, with
each server's own readiness checks and gauges (alerts read them)."""

import aiohttp

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
                assert "nodes synced" in await response.text()
            synced = True
            async with http.get(base + "/readyz") as response:
                assert response.status == 200
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

"""HealthServer: /healthz always, /readyz only when every check passes, /metrics as text."""

import aiohttp

from hostaffinity.runtime.health import HealthServer


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

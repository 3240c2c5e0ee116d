"""A real Prometheus (Debian's package) on loopback for the monitoring tests: started with rule
files and jobs scraped as the shipped PodMonitors make the Prometheus operator scrape them, and
asked through its HTTP API."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.integration.webhook_harness import eventually_true
from tests.monitoring.monitoring import rule_groups, scrape_config, tool
from tests.platform.nats import free_port

OUR_NAMESPACE = "hostaffinity"
# Served by the descheduler only; in-process tests serve every instrument on every job.
DESCHEDULER_ONLY = "hostaffinity_workloads_exposed"


async def api(http: aiohttp.ClientSession, base: str, path: str, **params: str) -> Any:
    async with http.get(f"{base}/api/v1/{path}", params=params) as response:
        body = await response.json()
    assert body["status"] == "success", (path, params, body)
    return body["data"]


@contextlib.asynccontextmanager
async def prometheus(
    tmp_path: Path, jobs: Mapping[str, int], rules: Mapping[str, Any] | None = None
) -> AsyncIterator[str]:
    """Prometheus scraping each job's port every second with `rules` (a rule file's content;
    the shipped rules by default); its base URL. The services of one test share the process's
    instruments, so every job but the descheduler drops the descheduler's exposure gauge, as a
    cluster's would not serve it."""
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(dict(rules or rule_groups())), encoding="utf-8")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rule_file)],
        "scrape_configs": [scrape_config(job, port, OUR_NAMESPACE) for job, port in jobs.items()],
    }
    for job in config["scrape_configs"]:
        if job["job_name"] != "descheduler":
            job["metric_relabel_configs"] = [
                {"source_labels": ["__name__"], "regex": DESCHEDULER_ONLY, "action": "drop"}
            ]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        tool("prometheus"),
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:

            async def answers() -> bool:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"{base}/-/ready") as response:
                        return response.status == 200
                return False

            await eventually_true(answers, "Prometheus never became ready")
        yield base
    finally:
        process.terminate()
        await process.wait()


async def until_answered(
    http: aiohttp.ClientSession, base: str, query: str, within: float = 20.0
) -> list[dict[str, Any]]:
    """The query's first non-empty result, polled until `within` seconds have passed."""
    for _ in range(int(within / 0.2)):
        found: list[dict[str, Any]] = (await api(http, base, "query", query=query))["result"]
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"no answer to {query} within {within} s")

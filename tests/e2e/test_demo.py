"""`hostaffinity demo` against what `make dev` started on the Kubernetes double (no
kube-scheduler, KubeVirt's API served without its controllers): every step that needs no
scheduler runs and passes, KubeVirt's three included, the webhook's is reported not run."""

import asyncio
from pathlib import Path

import pytest

from tests.e2e.dev_world import REPO, DevRun, running_dev
from tests.platform.kube_double import KubeDouble

pytestmark = pytest.mark.timeout(360)


async def run_demo(dev: DevRun) -> tuple[int, str]:
    """The demo as the quick start runs it, against this dev run's ports; exit code and output."""
    state = Path(dev.environment["DEV_STATE"])
    vcsim_url = (state / "vcsim.out").read_text().split("VCSIM_URL=", 1)[1].split()[0]
    demo = await asyncio.create_subprocess_exec(
        *(str(REPO / ".venv/bin/hostaffinity"), "demo", "--vcenter", vcsim_url),
        *("--nats", f"nats://127.0.0.1:{dev.environment['NATS_PORT']}"),
        *("--nats-seed", str(state / "nats" / "cli.nk")),
        env=dev.environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output = (await demo.communicate())[0].decode()
    assert demo.returncode is not None
    return demo.returncode, output


async def test_demo_plays_every_step_that_needs_no_scheduler(
    kube_double: KubeDouble, tmp_path: Path
) -> None:
    async with running_dev(kube_double, tmp_path) as dev:
        code, output = await run_demo(dev)
        print(output)
        assert code == 0, output
        assert output.count("check passed") == 7, output
        assert "not run: no kube-scheduler here" in output, output
        for said in ("2 of the 3 VMs piled on", "off the shared host", "its taint tolerated"):
            assert said in output, output
        assert output.rstrip().endswith("demo: 7 steps passed, 0 failed, 1 not run"), output
        await dev.interrupt()
        assert dev.leftovers() == []

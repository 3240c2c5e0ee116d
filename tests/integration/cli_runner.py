"""Running `hostaffinity` in a test as main() runs, and checking its `-o json` against proto/."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from hostaffinity.schema import utc_timestamp
from tests.e2e.harness import FAST_LEASE
from tests.platform.console import exit_code
from tests.platform.nats import NatsServer

PROTO = Path(__file__).resolve().parents[2] / "proto" / "schemas"
# The command (and its subject) -> the JSON Schema its `-o json` document follows.
REPORTS = {
    ("topology",): "TopologyReport",
    ("exposure",): "ExposureReport",
    ("what-if",): "MaintenanceReport",
    ("what-if", "host-failure"): "HostFailureReport",
    ("explain", "pod"): "PodExplanation",
    ("explain", "node"): "NodeExplanation",
    ("status",): "StatusReport",
}


def schema_of(argv: Sequence[str]) -> dict[str, Any]:
    """The JSON Schema of what `argv` prints with `-o json`."""
    name = REPORTS.get(tuple(argv[:2])) or REPORTS[(argv[0],)]
    loaded: dict[str, Any] = json.loads((PROTO / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


class Cli:
    """Runs `hostaffinity` as main() does, in a thread, so the double and NATS keep serving."""

    def __init__(self, kubeconfig: Path, nats: NatsServer, capsys: pytest.CaptureFixture[str]):
        self.common = ["--kubeconfig", str(kubeconfig), "--nats", nats.url]
        self.capsys = capsys

    async def __call__(self, *argv: str) -> tuple[int, str, str]:
        command = list(argv)
        position = 1  # options go after the subcommands and their arguments
        while position < len(command) and not command[position].startswith("-"):
            position += 1
        command[position:position] = self.common
        self.capsys.readouterr()
        code = await asyncio.to_thread(exit_code, command)
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    async def json(self, *argv: str) -> tuple[int, Any]:
        """The command's `-o json` document, validated against its JSON Schema in proto/."""
        code, out, err = await self(*argv, "-o", "json")
        assert out, err
        document = json.loads(out)
        jsonschema.Draft202012Validator(schema_of(argv)).validate(document)
        return code, document


def lease(service: str, holder: str, renewed: datetime, duration_s: int = 60) -> dict[str, Any]:
    """A Lease as runtime/kube/leader.py writes it, held since a minute before its last renewal."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": f"hostaffinity-{service}", "namespace": FAST_LEASE.namespace},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            "acquireTime": utc_timestamp(renewed - timedelta(minutes=1)),
            "renewTime": utc_timestamp(renewed),
            "leaseTransitions": 0,
        },
    }

"""The runner's command line: `--version`, `--check-config`, and config errors (exit 2)."""

import json
import logging
from pathlib import Path

import pytest

from hostaffinity.runtime.process.config import (
    LeaderElectedSettings,
    LoggingSettings,
    ServiceSettings,
)
from hostaffinity.runtime.runner import ServiceContext, ServiceSpec, configure_logging, run_service


class CliConfig(LeaderElectedSettings, frozen=True):
    """A service's config record."""

    greeting: str = "hello"
    password: str = "hunter2"
    token_file: str | None = None


async def _never_called(ctx: ServiceContext[CliConfig]) -> None:
    raise AssertionError("--check-config and --version must not start the work")


# Named after the runtime's own distribution, so --version has a version to print.
SPEC = ServiceSpec(name="runtime", config_type=CliConfig, work=_never_called, leader_elected=True)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run_service(SPEC, ["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == "hostaffinity-runtime 0.2.0\n"


def test_check_config_prints_the_layered_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared.yaml"
    shared.write_text("greeting: hi\nnats:\n  stream_replicas: 3\n")
    own = tmp_path / "own.yaml"
    own.write_text("lease:\n  duration_seconds: 30\nlogging:\n  format: json\n")
    monkeypatch.setenv("HOSTAFFINITY_NATS__KV_REPLICAS", "3")
    with pytest.raises(SystemExit) as exited:
        run_service(SPEC, ["--config", str(shared), "--config", str(own), "--check-config"])
    assert exited.value.code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["greeting"] == "hi"
    assert printed["nats"]["stream_replicas"] == printed["nats"]["kv_replicas"] == 3
    assert printed["lease"]["duration_seconds"] == 30
    assert printed["logging"]["format"] == "json"
    assert printed["password"] == "<redacted>"
    assert printed["token_file"] is None
    assert "hunter2" not in json.dumps(printed)


def test_check_config_rejects_an_unknown_key_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("lease:\n  duration_secnds: 30\n")
    with pytest.raises(SystemExit) as exited:
        run_service(SPEC, ["--config", str(bad), "--check-config"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("hostaffinity-runtime: invalid configuration for CliConfig")
    assert "duration_secnds" in error


def test_a_service_without_a_lease_section_cannot_be_leader_elected() -> None:
    async def work(ctx: ServiceContext[ServiceSettings]) -> None:
        raise AssertionError("never started")

    with pytest.raises(TypeError, match="no lease section"):
        ServiceSpec(name="x", config_type=ServiceSettings, work=work, leader_elected=True)


def test_json_log_lines(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        configure_logging(LoggingSettings(format="json", level="INFO"))
        logging.getLogger("hostaffinity.test").info("leader is %s", "a")
        logging.getLogger("hostaffinity.test").debug("not shown")
    finally:
        logging.basicConfig(force=True)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert (line["level"], line["logger"], line["message"]) == (
        "INFO",
        "hostaffinity.test",
        "leader is a",
    )

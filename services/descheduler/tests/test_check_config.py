"""`hostaffinity-descheduler --check-config` checks what the start would read: the policy file is
loaded as the work loads it, and numbers out of range are refused; each failure is one line on
stderr naming where it came from, with exit 2. The start itself refuses the same config before it
connects to anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hostaffinity.descheduler.main import main
from tests.platform.console import clear_hostaffinity_environment, run_console
from tests.recorded_fixtures import fixture_dir

PROGRAM = "hostaffinity-descheduler"


def policy(plugin: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    configs: list[dict[str, Any]] = [{"name": "DefaultEvictor", "args": {}}]
    if args is not None:
        configs.append({"name": plugin, "args": args})
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "profiles": [
            {"name": "p", "pluginConfig": configs, "plugins": {"deschedule": {"enabled": [plugin]}}}
        ],
    }


def config_naming(tmp_path: Path, policy_file: Path | str, **descheduler: Any) -> Path:
    config = tmp_path / "descheduler.yaml"
    settings = {"policy_file": str(policy_file), **descheduler}
    config.write_text(yaml.safe_dump({"descheduler": settings}), encoding="utf-8")
    return config


def written(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _only_the_tests_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_hostaffinity_environment(monkeypatch)


def test_a_good_policy_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = fixture_dir("descheduler") / "policy-affinity-v1alpha2.yaml"
    config = config_naming(tmp_path, good)
    code, out, err = run_console(main, ["--config", str(config), "--check-config"], capsys)
    assert (code, err) == (0, "")
    assert str(good) in out


@pytest.mark.parametrize(
    ("policy_file", "needle"),
    [
        (None, "cannot read the policy"),
        (policy("RemoveFailedPods"), "plugin 'RemoveFailedPods' is not supported"),
        (
            policy("RemovePodsViolatingNodeAffinity", {"nodeAffinityTyp": ["x"]}),
            "RemovePodsViolatingNodeAffinity: Object contains unknown field `nodeAffinityTyp`",
        ),
    ],
    ids=["missing-file", "unsupported-plugin", "misspelt-argument"],
)
def test_a_bad_policy_is_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    policy_file: dict[str, Any] | None,
    needle: str,
) -> None:
    path = tmp_path / "absent.yaml" if policy_file is None else written(tmp_path, policy_file)
    config = config_naming(tmp_path, path)
    code, out, err = run_console(main, ["--config", str(config), "--check-config"], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"{PROGRAM}: descheduler.policy_file {path}: ")
    assert needle in err
    assert err.count("\n") == 1, err


def test_the_start_refuses_a_bad_policy_before_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No NATS and no Kubernetes API here: exit 2 with the policy's line proves the check ran
    first, not a connection retried for ever."""
    config = config_naming(tmp_path, written(tmp_path, policy("RemoveFailedPods")))
    code, _, err = run_console(main, ["--config", str(config)], capsys)
    assert code == 2
    assert "plugin 'RemoveFailedPods' is not supported" in err


def test_out_of_range_numbers_name_their_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = fixture_dir("descheduler") / "policy-affinity-v1alpha2.yaml"
    config = config_naming(tmp_path, good, interval_seconds=-5)
    code, _, err = run_console(main, ["--config", str(config), "--check-config"], capsys)
    assert code == 2
    assert "Expected `float` > 0.0 - at `$.descheduler.interval_seconds`" in err
    assert err.endswith(f"(from config file {config}, key descheduler.interval_seconds)\n")
    monkeypatch.setenv("HOSTAFFINITY_HEALTH__PORT", "99999")
    config = config_naming(tmp_path, good)
    code, _, err = run_console(main, ["--config", str(config), "--check-config"], capsys)
    assert code == 2
    assert err.endswith(
        "Expected `int` <= 65535 - at `$.health.port` "
        "(from environment variable HOSTAFFINITY_HEALTH__PORT)\n"
    )

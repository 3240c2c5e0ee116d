"""load_config: files merge in order, the environment wins, unknown keys are errors."""

from pathlib import Path

import msgspec
import pytest

from hostaffinity.runtime.config import (
    ConfigError,
    HealthSettings,
    NatsSettings,
    Settings,
    SharedSettings,
    env_names,
    load_config,
)


class ExampleConfig(Settings, frozen=True):
    shared: SharedSettings = SharedSettings()
    nats: NatsSettings = NatsSettings()
    health: HealthSettings = HealthSettings()
    resync_seconds: float = 30.0


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_files_or_environment() -> None:
    config = load_config(ExampleConfig, environ={})
    assert config.health.port == 8080
    assert config.shared.physical_anti_affinity == "opt-in"


def test_later_files_override_earlier_ones_key_by_key(tmp_path: Path) -> None:
    shared = write(
        tmp_path, "shared.yaml", "shared:\n  legacy_host_label: false\nhealth:\n  port: 1\n"
    )
    own = write(tmp_path, "own.yaml", "health:\n  port: 9090\nresync_seconds: 5\n")
    config = load_config(ExampleConfig, [shared, own], environ={})
    assert config.shared.legacy_host_label is False
    assert config.health.port == 9090
    assert config.health.host == "0.0.0.0"
    assert config.resync_seconds == 5.0


def test_environment_overrides_files_with_nested_names(tmp_path: Path) -> None:
    own = write(tmp_path, "own.yaml", "health:\n  port: 9090\n")
    environ = {
        "HOSTAFFINITY_HEALTH__PORT": "7070",
        "HOSTAFFINITY_NATS__SERVERS": '["nats://a:4222", "nats://b:4222"]',
        "HOSTAFFINITY_SHARED__PHYSICAL_ANTI_AFFINITY": "cluster-wide",
        "HOSTAFFINITY_NATS__CREDS_FILE": "off",
        "UNRELATED": "x",
    }
    config = load_config(ExampleConfig, [own], environ=environ)
    assert config.health.port == 7070
    assert config.nats.servers == ["nats://a:4222", "nats://b:4222"]
    assert config.shared.physical_anti_affinity == "cluster-wide"
    assert config.nats.creds_file == "off"


@pytest.mark.parametrize(
    ("text", "environ", "needle"),
    [
        ("helth:\n  port: 1\n", {}, "helth"),
        ("", {"HOSTAFFINITY_HEALTH__PROT": "1"}, "prot"),
        ("health:\n  port: eighty\n", {}, "health.port"),
        ("shared:\n  physical_anti_affinity: sometimes\n", {}, "physical_anti_affinity"),
        ("- a list\n", {}, "must hold a mapping"),
        ("health: [unclosed\n", {}, "not valid YAML"),
    ],
    ids=["typo-in-file", "typo-in-env", "wrong-type", "bad-enum", "not-a-mapping", "bad-yaml"],
)
def test_bad_configuration_is_a_clear_error(
    tmp_path: Path, text: str, environ: dict[str, str], needle: str
) -> None:
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError, match=needle):
        load_config(ExampleConfig, [path], environ=environ)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(ExampleConfig, [tmp_path / "absent.yaml"], environ={})


def test_env_names_lists_what_the_loader_accepts() -> None:
    names = env_names(ExampleConfig)
    assert "HOSTAFFINITY_HEALTH__PORT" in names
    assert "HOSTAFFINITY_SHARED__PHYSICAL_ANTI_AFFINITY" in names
    assert "HOSTAFFINITY_RESYNC_SECONDS" in names
    for name in names:
        load_config(ExampleConfig, environ={name: _sample_value(name)})


def _sample_value(name: str) -> str:
    samples = {"PORT": "1", "SERVERS": "[]", "PHYSICAL_ANTI_AFFINITY": "disabled"}
    samples |= {"UNKNOWN_PLACEMENT": "pass", "LEGACY_HOST_LABEL": "true"}
    last = name.rsplit("__", 1)[-1].removeprefix("HOSTAFFINITY_")
    return samples.get(last, "1")


@pytest.mark.parametrize(
    ("physical", "unknown", "as_host", "disabled", "fails"),
    [
        ("opt-in", "fail", False, False, True),
        ("cluster-wide", "pass", True, False, False),
        ("disabled", "fail", False, True, True),
    ],
)
def test_shared_settings_answer_by_name(
    physical: str, unknown: str, as_host: bool, disabled: bool, fails: bool
) -> None:
    shared = msgspec.convert(
        {"physical_anti_affinity": physical, "unknown_placement": unknown}, SharedSettings
    )
    assert shared.reads_hostname_as_host is as_host
    assert shared.physical_anti_affinity_disabled is disabled
    assert shared.fails_unplaced is fails

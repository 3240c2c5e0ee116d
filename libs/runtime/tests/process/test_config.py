"""load_config: files merge in order, the environment wins, unknown keys are errors."""

from pathlib import Path

import msgspec
import pytest

from hostaffinity.runtime.process.config import (
    ConfigError,
    HealthSettings,
    LeaderElectedSettings,
    NatsSettings,
    Settings,
    SharedSettings,
    env_names,
    load_config,
)
from hostaffinity.runtime.vcenter.session import VCenterSettings


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


@pytest.mark.parametrize(
    ("files", "environ", "source"),
    [
        (
            ["health:\n  port: 1\n", "health:\n  port: eighty\n"],
            {},
            "(from config file {1}, key health.port)",
        ),
        (
            ["health:\n  port: 1\n"],
            {"HOSTAFFINITY_HEALTH__PORT": "99999"},
            "(from environment variable HOSTAFFINITY_HEALTH__PORT)",
        ),
        (
            ["lease:\n  duration_secnds: 3\n"],
            {},
            "(from config file {0}, key lease.duration_secnds)",
        ),
        (
            [],
            {"HOSTAFFINITY_NO_SUCH__KEY": "1"},
            "(from environment variable HOSTAFFINITY_NO_SUCH__KEY)",
        ),
        (
            [],
            {"HOSTAFFINITY_NATS__SERVERS": '["nats://a:4222", 7]'},
            "(from environment variable HOSTAFFINITY_NATS__SERVERS)",
        ),
        (
            ["lease:\n  renew_deadline_seconds: 20\n"],
            {},
            "(from config file {0}, key lease.renew_deadline_seconds)",
        ),
    ],
    ids=["later-file", "env-over-file", "unknown-key-in-file", "unknown-env", "list-item", "rule"],
)
def test_a_bad_value_names_the_file_and_key_or_variable_it_came_from(
    tmp_path: Path, files: list[str], environ: dict[str, str], source: str
) -> None:
    paths = [write(tmp_path, f"{index}.yaml", text) for index, text in enumerate(files)]
    with pytest.raises(ConfigError) as raised:
        load_config(LeaderElectedSettings, paths, environ=environ)
    message = str(raised.value)
    assert message.endswith(source.format(*paths)), message
    assert "\n" not in message


def test_a_missing_required_field_says_how_to_set_it() -> None:
    class NeedsVCenter(Settings, frozen=True, kw_only=True):
        vcenter: VCenterSettings

    environ = {"HOSTAFFINITY_VCENTER__USERNAME": "u", "HOSTAFFINITY_VCENTER__PASSWORD": "p"}
    with pytest.raises(ConfigError) as raised:
        load_config(NeedsVCenter, environ=environ)
    assert str(raised.value).endswith(
        "(set vcenter.host in a config file or HOSTAFFINITY_VCENTER__HOST)"
    )


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("HOSTAFFINITY_HEALTH__PORT", "99999", "Expected `int` <= 65535 - at `$.health.port`"),
        ("HOSTAFFINITY_HEALTH__PORT", "-1", "Expected `int` >= 0 - at `$.health.port`"),
        ("HOSTAFFINITY_DRAIN_SECONDS", "-5", "Expected `float` >= 0.0 - at `$.drain_seconds`"),
        ("HOSTAFFINITY_NATS__KV_REPLICAS", "0", "Expected `int` >= 1 - at `$.nats.kv_replicas`"),
        ("HOSTAFFINITY_NATS__STREAM_REPLICAS", "7", "<= 5 - at `$.nats.stream_replicas`"),
        ("HOSTAFFINITY_NATS__EVENTS_MAX_BYTES", "-2", ">= -1 - at `$.nats.events_max_bytes`"),
        ("HOSTAFFINITY_LEASE__RETRY_PERIOD_SECONDS", "0", "> 0.0 - at `$.lease.retry_period"),
        ("HOSTAFFINITY_LEASE__DURATION_SECONDS", "10", "must be greater than renew_deadline"),
        ("HOSTAFFINITY_LEASE__RETRY_PERIOD_SECONDS", "9", "greater than 1.2 x retry_period"),
        ("HOSTAFFINITY_KUBERNETES__WATCH_TIMEOUT_SECONDS", "0", ">= 1 - at `$.kubernetes.watch"),
    ],
)
def test_numbers_outside_their_range_are_refused(variable: str, value: str, needle: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(LeaderElectedSettings, environ={variable: value})
    assert needle in str(raised.value)
    assert str(raised.value).endswith(f"(from environment variable {variable})")


def test_the_edges_of_each_range_are_accepted() -> None:
    environ = {
        "HOSTAFFINITY_HEALTH__PORT": "0",
        "HOSTAFFINITY_DRAIN_SECONDS": "0",
        "HOSTAFFINITY_NATS__STREAM_REPLICAS": "5",
        "HOSTAFFINITY_NATS__EVENTS_MAX_BYTES": "-1",
        "HOSTAFFINITY_NATS__EVENTS_MAX_AGE_SECONDS": "0",
    }
    config = load_config(LeaderElectedSettings, environ=environ)
    assert (config.health.port, config.nats.stream_replicas) == (0, 5)


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

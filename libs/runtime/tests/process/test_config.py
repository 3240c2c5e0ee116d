"""load_config: files merge in order, the environment wins, unknown keys are errors."""

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import msgspec
import pytest

from hostaffinity.affinity.interpod import reads_physically
from hostaffinity.runtime.process.config import (
    ConfigError,
    HealthSettings,
    LeaderElectedSettings,
    NatsSettings,
    Settings,
    SharedSettings,
    env_names,
    generic_env_name,
    load_config,
)
from hostaffinity.runtime.vcenter.settings import (
    ONE_VCENTER_KEYS,
    VCenterServiceSettings,
    VCenterSettings,
)
from hostaffinity.schema import POD_PHYSICAL_ANTI_AFFINITY


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
    ("physical", "unknown", "plain", "annotated", "fails"),
    [
        ("opt-in", "fail", False, True, True),
        ("cluster-wide", "pass", True, True, False),
        ("disabled", "fail", False, False, True),
    ],
)
def test_shared_settings_answer_by_name(
    physical: str, unknown: str, plain: bool, annotated: bool, fails: bool
) -> None:
    shared = msgspec.convert(
        {"physical_anti_affinity": physical, "unknown_placement": unknown}, SharedSettings
    )
    assert reads_physically(shared.physical_anti_affinity, {}) is plain
    opted_in = {POD_PHYSICAL_ANTI_AFFINITY: "true"}
    assert reads_physically(shared.physical_anti_affinity, opted_in) is annotated
    assert shared.fails_unplaced is fails


class TwoVCentersConfig(VCenterServiceSettings, frozen=True, kw_only=True):
    """A service record with the vCenter list and a moved key, as the two vCenter services."""

    resync_seconds: float = 30.0

    MOVED_KEYS: ClassVar[Mapping[str, str]] = {
        **ONE_VCENTER_KEYS,
        "match_fallback": "now `labeller.match_fallback`",
    }


def test_a_number_between_underscores_is_a_list_item(tmp_path: Path) -> None:
    """The Secret's keys reach item i of `vcenters` from the environment; the file names it."""
    own = write(tmp_path, "own.yaml", "vcenters:\n  - name: vc-a\n  - name: vc-b\n")
    environ = {
        f"HOSTAFFINITY_VCENTERS__{index}__{key}": value
        for index in (0, 1)
        for key, value in (("HOST", f"vc{index}.example"), ("USERNAME", "u"), ("PASSWORD", "9"))
    }
    config = load_config(TwoVCentersConfig, [own], environ=environ)
    assert [(v.known_as, v.host, v.password) for v in config.vcenters] == [
        ("vc-a", "vc0.example", "9"),  # text stays text, though it reads as a number
        ("vc-b", "vc1.example", "9"),
    ]
    assert "HOSTAFFINITY_VCENTERS__<N>__HOST" in env_names(TwoVCentersConfig)
    del environ["HOSTAFFINITY_VCENTERS__1__USERNAME"]
    with pytest.raises(ConfigError) as raised:
        load_config(TwoVCentersConfig, [own], environ=environ)
    assert str(raised.value).endswith(
        "(set vcenters[1].username in a config file or HOSTAFFINITY_VCENTERS__1__USERNAME)"
    )
    assert generic_env_name("HOSTAFFINITY_VCENTERS__12__HOST") == "HOSTAFFINITY_VCENTERS__<N>__HOST"


def test_vcenters_named_alike_are_refused() -> None:
    environ = {
        f"HOSTAFFINITY_VCENTERS__{index}__{key}": "same"
        for index in (0, 1)
        for key in ("HOST", "USERNAME", "PASSWORD")
    }
    with pytest.raises(ConfigError, match="two or more are named same; give each its own"):
        load_config(TwoVCentersConfig, environ=environ)


def test_an_old_layout_is_one_error_saying_how_to_rewrite_it(tmp_path: Path) -> None:
    old = write(
        tmp_path,
        "old.yaml",
        "vcenter:\n  host: vc\n  username: u\n  password: p\nvcenter_name: vc-a\n"
        "match_fallback: none\n",
    )
    with pytest.raises(ConfigError) as raised:
        load_config(TwoVCentersConfig, [old], environ={"HOSTAFFINITY_VCENTER__PORT": "443"})
    message = str(raised.value)
    assert "\n" not in message
    assert "rewrite them (docs/upgrade.md)" in message
    assert f"`vcenter` (from config file {old}, key vcenter.host;" in message
    assert "environment variable HOSTAFFINITY_VCENTER__PORT" in message
    assert "item of the list `vcenters:`" in message
    assert f"`vcenter_name` (from config file {old}, key vcenter_name): now `name`" in message
    assert "`match_fallback` (from config file" in message
    assert "now `labeller.match_fallback`" in message

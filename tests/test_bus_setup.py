"""The bus as shipped: auth.conf is the rendering of the permission table, the credentials the
`bus` commands make are usable, and `bus provision` / `--check-config` say what they did or
what is missing."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import nkeys
import pytest
from cryptography import x509

from hostaffinity.cli.bus_access import (
    IDENTITIES,
    IDENTITY_NAMES,
    OUR_STREAMS,
    render_auth_config,
)
from hostaffinity.cli.bus_credentials import (
    SERVER_ENV_FILE,
    identities_secret,
    public_key,
    server_hostnames,
    tls_secret,
    write_local_credentials,
)
from hostaffinity.cli.bus_subscribers import (
    checked_event_types,
    checked_name,
    render_subscribers_conf,
)
from hostaffinity.runtime.process.config import NatsSettings
from tests.platform.console import SCRIPTS
from tests.platform.nats import nats_server_binary
from tests.platform.nats_cluster import SHIPPED

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_auth_conf_is_the_rendering_of_the_permission_table() -> None:
    assert (SHIPPED / "auth.conf").read_text(encoding="utf-8") == render_auth_config(), (
        "k8s/base/nats/auth.conf is stale: run "
        "`uv run --frozen hostaffinity bus auth-config > k8s/base/nats/auth.conf`"
    )


def test_every_service_has_an_identity_and_replies_only_on_its_own_inbox() -> None:
    services = {path.name for path in (ROOT / "services").iterdir() if path.is_dir()}
    assert services <= set(IDENTITY_NAMES)
    for who in IDENTITIES:
        assert who.subscribe == (f"_INBOX_{who.name}.>",)
        assert NatsSettings(identity=who.name).inbox_prefix == f"_INBOX_{who.name}"
        # In a fleet, under the install's token, still inside what the identity may read: the
        # hub sends an install only the answers to its own requests.
        in_fleet = NatsSettings(identity=who.name, fleet_install="k3f9").inbox_prefix
        assert in_fleet == f"_INBOX_{who.name}.k3f9"
        removals = [s for s in who.publish if ".DELETE." in s or ".PURGE." in s]
        if who.name == "provision":  # `hostaffinity uninstall`: our streams, nothing else
            assert removals == [f"$JS.API.STREAM.DELETE.{s}" for s in OUR_STREAMS]
        else:
            assert not removals, who.name


def test_local_credentials_are_nkeys_kept_across_runs(tmp_path: Path) -> None:
    first = write_local_credentials(tmp_path)
    seeds = {name: path.read_bytes() for name, path in first.items()}
    write_local_credentials(tmp_path)
    assert {name: path.read_bytes() for name, path in first.items()} == seeds
    env = dict(line.split("=", 1) for line in (tmp_path / SERVER_ENV_FILE).read_text().splitlines())
    for who in IDENTITIES:
        assert oct(first[who.name].stat().st_mode & 0o777) == "0o600"
        key = env[who.public_key_variable]
        assert key == public_key(seeds[who.name].strip())
        assert key.startswith("U")  # a user nkey, which nats-server reads as a bare string


def test_both_shipped_server_configs_load_with_generated_credentials(tmp_path: Path) -> None:
    """nats-server itself checks the files (`-t`), with the environment the Secret or the
    credentials step gives it; a missing key variable would fail here."""
    write_local_credentials(tmp_path / "credentials")
    env_lines = (tmp_path / "credentials" / SERVER_ENV_FILE).read_text().splitlines()
    env = dict(line.split("=", 1) for line in env_lines)
    for name in ("local.conf", "auth.conf", "subscribers.conf"):
        (tmp_path / name).write_text((SHIPPED / name).read_text())
    checked = subprocess.run(
        [str(nats_server_binary()), "-c", str(tmp_path / "local.conf"), "-t"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    missing = subprocess.run(
        [str(nats_server_binary()), "-c", str(tmp_path / "local.conf"), "-t"],
        env={},
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode != 0
    assert "NATS_NKEY_" in missing.stderr


def test_kubernetes_secrets_hold_seeds_public_keys_and_the_servers_tls() -> None:
    identities = identities_secret("hostaffinity")
    data = {key: base64.b64decode(value) for key, value in identities["data"].items()}
    for who in IDENTITIES:
        seed = data[f"{who.name}.nk"]
        assert (
            nkeys.from_seed(bytearray(seed)).public_key.decode() == data[f"{who.name}.pub"].decode()
        )
    tls = tls_secret("hostaffinity")
    cert = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = set(names.get_values_for_type(x509.DNSName))
    addresses = {str(address) for address in names.get_values_for_type(x509.IPAddress)}
    assert {
        "nats.hostaffinity.svc",
        "nats-headless.hostaffinity.svc.cluster.local",
        "*.nats-headless",
        "*.nats-headless.hostaffinity.svc",
        "localhost",
    } <= dns
    # docs/install.md's `--nats tls://127.0.0.1:4222` through a port-forward.
    assert addresses == {"127.0.0.1", "::1"}
    assert set(server_hostnames("hostaffinity")) == dns | addresses
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH in usages  # routes are mutual TLS


def test_check_config_names_a_missing_seed_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("nats:\n  identity: descheduler\n  nkey_seed_file: /nonexistent/seed.nk\n")
    checked = subprocess.run(
        [SCRIPTS / "hostaffinity-descheduler", "--config", str(config), "--check-config"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 2
    assert "nats.nkey_seed_file (/nonexistent/seed.nk)" in checked.stderr


def test_shipped_subscribers_conf_is_the_rendering_without_subscribers() -> None:
    assert (SHIPPED / "subscribers.conf").read_text(encoding="utf-8") == (
        render_subscribers_conf([])
    )


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("Audit", "lower-case"),
        ("a.b", "lower-case"),
        ("cli", "taken by hostaffinity"),
        ("hostaffinity-descheduler", "taken by hostaffinity"),
    ],
)
def test_a_subscriber_name_that_cannot_name_an_inbox_and_a_consumer_is_refused(
    name: str, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        checked_name(name)


def test_unknown_event_types_are_named_all_at_once() -> None:
    assert checked_event_types("vm.moved, pod.evicted,vm.moved") == ("vm.moved", "pod.evicted")
    with pytest.raises(ValueError, match=r"unknown event types vm\.move, pod\.deleted; the types"):
        checked_event_types("vm.move,pod.deleted")

"""vCenter's certificate, as a site's VMCA signs it: vcsim over TLS with a CA of the test's own.

Trusted through `vcenters[i].ca_file` or a pinned `vcenters[i].thumbprint`, a login works;
otherwise the login, `--check-config` (through the services' runner) and the service's start-up
retries each say in one line which setting to change, by the key the config loader reads
(`vcenters[0].ca_file`; a session, which holds only its item, names it `vcenters[name=<its
name>]`), and which thumbprint the server presents.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from pathlib import Path

import pytest
import yaml

from hostaffinity.drs_translator.main import main as drs_translator_main
from hostaffinity.node_labeller.main import main as node_labeller_main
from hostaffinity.runtime.http.certificates import ServingIdentity, issue
from hostaffinity.runtime.vcenter.session import VCenterSession, connect
from hostaffinity.runtime.vcenter.trust import VCenterTrustError, thumbprint_of
from tests.platform.console import clear_hostaffinity_environment, run_console
from tests.platform.vcsim import Vcsim, VcsimFactory

MAINS = {"node-labeller": node_labeller_main, "drs-translator": drs_translator_main}
SERVICES = list(MAINS)


def vmca(*hostnames: str) -> ServingIdentity:
    """A CA of our own and the certificate it signs for vcsim, as the VMCA signs vCenter's."""
    return issue(list(hostnames), datetime.datetime.now(datetime.UTC), ca_name="test-vmca")


@pytest.fixture(autouse=True)
def _only_the_tests_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_hostaffinity_environment(monkeypatch)


@pytest.fixture
def vc(vcsim: VcsimFactory) -> Vcsim:
    return vcsim(hosts=1, vms=1, tls=vmca("127.0.0.1"))


def presented(vc: Vcsim) -> str:
    """The SHA-256 thumbprint of vcsim's certificate, computed here from the PEM it was given."""
    assert vc.ca_file is not None
    pem = (vc.ca_file.parent / "tls.crt").read_text()
    return thumbprint_of(ssl.PEM_cert_to_DER_cert(pem))


def check_config(
    service: str, vc: Vcsim, tmp_path: Path, capsys: pytest.CaptureFixture[str], **vcenter: object
) -> tuple[int, str]:
    """`hostaffinity-<service> --check-config` (its main, through the runner) on a config naming
    this vcsim; (exit, stderr)."""
    settings = {"host": vc.host, "port": vc.port, "username": "u", "password": "p"} | vcenter
    config = tmp_path / f"{service}.yaml"
    config.write_text(yaml.safe_dump({"vcenters": [settings]}))
    code, _, err = run_console(MAINS[service], ["--config", str(config), "--check-config"], capsys)
    return code, err


async def test_the_ca_bundle_is_trusted(vc: Vcsim) -> None:
    async with VCenterSession(vc.settings()) as session:
        assert await session.current_time()


@pytest.mark.parametrize(
    "form", ["SHA256:{colons}", "{colons_lower}", "{bare}"], ids=["prefixed", "lower", "bare"]
)
async def test_a_matching_thumbprint_is_trusted_without_a_ca(vc: Vcsim, form: str) -> None:
    colons = presented(vc).removeprefix("SHA256:")
    pinned = form.format(colons=colons, colons_lower=colons.lower(), bare=colons.replace(":", ""))
    async with VCenterSession(vc.settings(ca_file=None, thumbprint=pinned)) as session:
        assert await session.current_time()


def test_without_the_ca_the_login_says_which_setting_to_set(vc: Vcsim) -> None:
    with pytest.raises(VCenterTrustError) as raised:
        connect(vc.settings(ca_file=None))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"vcenter: certificate of 127.0.0.1:{vc.port} not trusted (")
    assert "set vcenters[name=127.0.0.1].ca_file to the CA bundle" in message
    assert message.endswith(f"or vcenters[name=127.0.0.1].thumbprint to {presented(vc)}")


def test_a_wrong_thumbprint_is_refused(vc: Vcsim) -> None:
    wrong = "SHA256:" + ":".join(["AB"] * 32)
    with pytest.raises(VCenterTrustError) as raised:
        connect(vc.settings(ca_file=None, thumbprint=wrong))
    message = str(raised.value)
    assert "\n" not in message
    assert (
        f"has thumbprint {presented(vc)}, not the vcenters[name=127.0.0.1].thumbprint {wrong}"
        in message
    )


def test_a_certificate_for_another_name_says_to_fix_the_host(vcsim: VcsimFactory) -> None:
    vc = vcsim(hosts=1, vms=1, tls=vmca("vcenter.example"))
    with pytest.raises(VCenterTrustError, match=r"set vcenters\[name=127\.0\.0\.1\]\.host to a"):
        connect(vc.settings())


@pytest.mark.parametrize("service", SERVICES)
def test_check_config_passes_with_the_ca_and_with_the_thumbprint(
    service: str, vc: Vcsim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check_config(service, vc, tmp_path, capsys, ca_file=str(vc.ca_file)) == (0, "")
    assert check_config(service, vc, tmp_path, capsys, thumbprint=presented(vc)) == (0, "")


@pytest.mark.parametrize("service", SERVICES)
def test_check_config_says_in_one_line_what_to_trust(
    service: str, vc: Vcsim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stderr = check_config(service, vc, tmp_path, capsys)
    assert code == 2
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"hostaffinity-{service}: vcenter: certificate of 127.0.0.1:")
    assert "set vcenters[0].ca_file to the CA bundle that signed it" in stderr
    assert presented(vc) in stderr
    wrong = "ab" * 32
    code, stderr = check_config(service, vc, tmp_path, capsys, thumbprint=wrong)
    assert code == 2
    assert stderr.count("\n") == 1, stderr
    assert f"not the vcenters[0].thumbprint {wrong}" in stderr


def test_check_config_names_a_missing_or_unreadable_ca_file(
    vc: Vcsim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stderr = check_config(
        "drs-translator", vc, tmp_path, capsys, ca_file="/nonexistent/ca.crt"
    )
    assert (code, stderr) == (
        2,
        "hostaffinity-drs-translator: configured file missing: vcenters[0].ca_file "
        "(/nonexistent/ca.crt); or pin the certificate with vcenters[0].thumbprint\n",
    )
    not_pem = tmp_path / "ca.crt"
    not_pem.write_text("not a certificate\n")
    code, stderr = check_config("drs-translator", vc, tmp_path, capsys, ca_file=str(not_pem))
    assert code == 2
    assert f"vcenters[0].ca_file ({not_pem}) is not a readable PEM CA bundle" in stderr


def test_check_config_rejects_a_malformed_thumbprint(
    vc: Vcsim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stderr = check_config("node-labeller", vc, tmp_path, capsys, thumbprint="AB:CD")
    assert code == 2
    assert "key vcenters[0].thumbprint" in stderr


def test_check_config_says_when_vcenter_cannot_be_reached(
    vc: Vcsim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = vc.port
    vc.stop()
    code, stderr = check_config("node-labeller", vc, tmp_path, capsys, ca_file=str(vc.ca_file))
    assert code == 1
    assert stderr.startswith(
        f"hostaffinity-node-labeller: vcenter: cannot reach 127.0.0.1:{port} to check its "
        "certificate: "
    )
    assert stderr.count("\n") == 1


async def test_a_starting_service_logs_the_setting_to_fix_while_it_waits(
    vc: Vcsim, caplog: pytest.LogCaptureFixture
) -> None:
    """The drs-translator's start (`start_when_reachable`) retries, saying each time in one
    line what to set: a fixed Secret is picked up without a restart."""
    session = VCenterSession(vc.settings(ca_file=None))
    with caplog.at_level(logging.WARNING, logger="hostaffinity.runtime.vcenter.session"):
        try:
            async with asyncio.timeout(3.0):
                await session.start_when_reachable(retry_seconds=0.5)
        except TimeoutError:
            pass
        finally:
            await session.close()
    lines = [record.getMessage() for record in caplog.records]
    assert lines
    assert all("set vcenters[name=127.0.0.1].ca_file to the CA" in line for line in lines), lines
    assert all("\n" not in line for line in lines)

"""The fleet hub's folder: what its operator keeps to run the hub and admit installs.

    <dir>/fleet-provision.nk, fleet-cli.nk   the hub's own identities (seeds)
    <dir>/tls/ca.crt, tls.crt, tls.key        the hub's CA and server certificate
    <dir>/installs.json                       the registered installs (name, token, public key)
    <dir>/installs.conf                       the hub's authorization, rendered from the above
    <dir>/installs/<name>/                    what one install needs to join: fleet.conf (its
                                              leaf remote, with its seed), fleet-domain.conf,
                                              hub-ca.crt

Made once and kept (`hostaffinity fleet hub-credentials`); `fleet join` and `fleet leave` edit
the registry and render installs.conf again. In Kubernetes the hub's Secrets are made from this
folder (docs/fleet.md).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import Final

from hostaffinity.cli.bus_credentials import (
    new_user_seed,
    public_key,
    server_hostnames,
    server_tls,
)
from hostaffinity.cli.fleet_access import (
    HUB_IDENTITIES,
    FleetMember,
    render_hub_authorization,
    render_install_domain,
    render_install_leaf,
)
from hostaffinity.schema import install_token

REGISTRY: Final = "installs.json"
HUB_AUTHORIZATION: Final = "installs.conf"
TLS_DIR: Final = "tls"
INSTALLS_DIR: Final = "installs"
LEAF_CONF: Final = "fleet.conf"
DOMAIN_CONF: Final = "fleet-domain.conf"
HUB_CA: Final = "hub-ca.crt"
# Where an install's nats-server finds the hub's CA (k8s/components/fleet-leaf mounts it there).
INSTALL_CA_PATH: Final = "/etc/nats/fleet/hub-ca.crt"
HUB_NAMESPACE: Final = "hostaffinity"
_NAME: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class RegistryError(ValueError):
    """A join or leave the registry refuses, said for the operator."""


def hub_hostnames(namespace: str = HUB_NAMESPACE) -> list[str]:
    """Every name an install or a route dials a hub server by, and loopback for port-forwards."""
    return server_hostnames(namespace, "fleet-hub", "fleet-hub-headless")


class HubFolder:
    """The hub's folder on the operator's machine."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def seed_file(self, identity: str) -> Path:
        return self.directory / f"{identity}.nk"

    @property
    def tls_dir(self) -> Path:
        return self.directory / TLS_DIR

    def install_dir(self, name: str) -> Path:
        return self.directory / INSTALLS_DIR / name

    def missing_credentials(self) -> list[Path]:
        """What `ensure_credentials` makes that is not there: join, leave and provision need
        it all."""
        wanted = [self.seed_file(who.name) for who in HUB_IDENTITIES]
        return [path for path in (*wanted, self.tls_dir / "ca.crt") if not path.exists()]

    def ensure_credentials(self, extra_hostnames: list[str] | None = None) -> list[Path]:
        """The hub's identities and TLS, each made only where absent; installs.conf rendered."""
        self.directory.mkdir(parents=True, exist_ok=True)
        made = []
        for who in HUB_IDENTITIES:
            path = self.seed_file(who.name)
            if not path.exists():
                _write_secret(path, new_user_seed() + b"\n")
                made.append(path)
        if not (self.tls_dir / "ca.crt").exists():
            self.tls_dir.mkdir(exist_ok=True)
            bundle = server_tls([*hub_hostnames(), *(extra_hostnames or [])])
            (self.tls_dir / "ca.crt").write_bytes(bundle.ca_pem)
            (self.tls_dir / "tls.crt").write_bytes(bundle.cert_pem)
            _write_secret(self.tls_dir / "tls.key", bundle.key_pem)
            made.append(self.tls_dir)
        self.render()
        return made

    def members(self) -> list[FleetMember]:
        path = self.directory / REGISTRY
        if not path.exists():
            return []
        return [FleetMember(**entry) for entry in json.loads(path.read_text(encoding="utf-8"))]

    def _save(self, members: list[FleetMember]) -> None:
        ordered = sorted(members, key=lambda member: member.name)
        text = json.dumps([asdict(member) for member in ordered], indent=2) + "\n"
        (self.directory / REGISTRY).write_text(text, encoding="utf-8")
        self.render()

    def render(self) -> None:
        """installs.conf from the registry and the hub's identities."""
        keys = {
            who.name: public_key(self.seed_file(who.name).read_bytes().strip())
            for who in HUB_IDENTITIES
        }
        text = render_hub_authorization(keys, self.members())
        (self.directory / HUB_AUTHORIZATION).write_text(text, encoding="utf-8")

    def join(
        self, name: str, cluster: str, hub_urls: list[str], ca_path: str = INSTALL_CA_PATH
    ) -> FleetMember:
        """Register the install of cluster identity `cluster` as `name`, with a new nkey, and
        write what it needs to join; joining again under the same name and cluster renews its
        key (the old one stops working once the hub reloads)."""
        if not _NAME.match(name):
            raise RegistryError(f"install name {name!r}: use lowercase letters, digits and dashes")
        if not hub_urls:
            raise RegistryError("give the hub's leaf-node URL(s) the install dials (--hub)")
        token = install_token(cluster)
        others = [member for member in self.members() if member.name != name]
        for other in others:
            if other.token == token:
                raise RegistryError(
                    f"cluster {cluster!r} (token {token}) is already in the fleet as "
                    f"{other.name!r}: one install per cluster"
                )
        seed = new_user_seed()
        member = FleetMember(name, token, public_key(seed))
        folder = self.install_dir(name)
        folder.mkdir(parents=True, exist_ok=True)
        leaf = render_install_leaf(token, seed.decode(), hub_urls, ca_path)
        _write_secret(folder / LEAF_CONF, leaf.encode())
        (folder / DOMAIN_CONF).write_text(render_install_domain(token), encoding="utf-8")
        (folder / HUB_CA).write_bytes((self.tls_dir / "ca.crt").read_bytes())
        self._save([*others, member])
        return member

    def leave(self, name: str) -> FleetMember:
        """Forget the install: its leaf user goes from installs.conf, its folder is removed."""
        members = self.members()
        leaving = [member for member in members if member.name == name]
        if not leaving:
            joined = ", ".join(member.name for member in members)
            raise RegistryError(
                f"no install {name!r} in the fleet; "
                + (f"its installs: {joined}" if joined else "none has joined (`fleet join`)")
            )
        self._save([member for member in members if member.name != name])
        folder = self.install_dir(name)
        for path in folder.glob("*"):
            path.unlink()
        if folder.exists():
            folder.rmdir()
        return leaving[0]


def _write_secret(path: Path, content: bytes) -> None:
    """Written readable by its owner only."""
    path.touch(mode=0o600)
    os.chmod(path, 0o600)
    path.write_bytes(content)

"""A fleet hub and installs' buses on loopback: real nats-servers, each with its own JetStream
domain, each install's server joined to the hub's as a leaf node (no auth, one account, and only
requests to another domain's JetStream API let across: what the tests of the fleet group's leases
need; the shipped hub and its leaf-node credentials are the fleet hub's own)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.kinds import refuse_in_fast_tests
from tests.platform.nats import NatsServer, free_port, nats_server_binary

HUB_DOMAIN = "hub"


class DomainNatsServer(NatsServer):
    """A nats-server with a JetStream domain, listening for leaf nodes (`leaf_port`) or joined
    to a hub as one (`hub_leaf_port`); restartable on the same ports and store."""

    def __init__(
        self,
        workdir: Path,
        domain: str,
        *,
        listen_for_leaves: bool = False,
        hub_leaf_port: int | None = None,
    ) -> None:
        super().__init__(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.domain = domain
        self.leaf_port = free_port() if listen_for_leaves else None
        self.config_file = workdir / "nats-server.conf"
        lines = [
            "listen: 127.0.0.1:" + str(self.port),
            f'jetstream {{ store_dir: "{self.store_dir}", domain: {domain} }}',
        ]
        if self.leaf_port is not None:
            lines.append(f"leafnodes {{ listen: 127.0.0.1:{self.leaf_port} }}")
        if hub_leaf_port is not None:
            # Only requests to another domain's JetStream API cross: an install's own events
            # and buckets stay its own (one account on every server, as nothing else here
            # separates them).
            local = '["hostaffinity.>", "$KV.>"]'
            remote = (
                f'{{ url: "nats-leaf://127.0.0.1:{hub_leaf_port}", '
                f"deny_imports: {local}, deny_exports: {local} }}"
            )
            lines.append(f"leafnodes {{ reconnect: 1, remotes: [ {remote} ] }}")
        self.config_file.write_text("\n".join(lines) + "\n", encoding="utf-8")

    async def start(self) -> None:
        refuse_in_fast_tests("a nats-server")
        self._process = await asyncio.create_subprocess_exec(
            str(nats_server_binary()),
            "-c",
            str(self.config_file),
            f"--log={self.log_file}",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await asyncio.wait_for(self._wait_ready(), 10.0)

    def leaf_connected(self) -> bool:
        """Whether the log says the leaf node connection to the other domain is up (the last
        such line: created or closed)."""
        if not self.log_file.exists():
            return False
        lines = [
            line
            for line in self.log_file.read_text(encoding="utf-8").splitlines()
            if "JetStream using domains" in line or "Leafnode connection closed" in line
        ]
        return bool(lines) and "JetStream using domains" in lines[-1]


def hub_server(workdir: Path) -> DomainNatsServer:
    return DomainNatsServer(workdir / "hub", HUB_DOMAIN, listen_for_leaves=True)


def install_server(workdir: Path, name: str, hub: DomainNatsServer) -> DomainNatsServer:
    """An install's bus in its own domain (its name), joined to `hub` as a leaf node."""
    return DomainNatsServer(workdir / name, name, hub_leaf_port=hub.leaf_port)

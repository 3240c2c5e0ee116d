"""Ways a command's Kubernetes access can be unusable, as files and sockets a test points the
command at: an empty or unparsable kubeconfig, one naming a server that refuses connections,
one naming a server that accepts them and never answers, one without credentials."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests.platform.kube_double import KubeDouble


def empty_kubeconfig(directory: Path) -> Path:
    (path := directory / "empty-kubeconfig").write_text("", encoding="utf-8")
    return path


def broken_kubeconfig(directory: Path) -> Path:
    """Not YAML at all: an unclosed flow sequence, as a truncated copy leaves it."""
    path = directory / "broken-kubeconfig"
    path.write_text("apiVersion: v1\nclusters: [\n  {name: c\n", encoding="utf-8")
    return path


def kubeconfig_for(directory: Path, server: str, name: str = "kubeconfig") -> Path:
    """A kubeconfig whose one context names `server`, with a bearer token."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    (path := directory / name).write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@contextmanager
def silent_listener() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel completes the handshake from the
    backlog) and never sends a byte: a hung API server or NATS."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def anonymous_kubeconfig(kube: KubeDouble, directory: Path) -> Path:
    """A kubeconfig for the double with no credentials: it takes it as system:anonymous (403)."""
    path = kube.write_kubeconfig(directory / "anonymous-kubeconfig")
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["users"][0]["user"] = {}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path

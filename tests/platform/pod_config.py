"""What a rendered Deployment's service would load, read as the kubelet and the service read it.

The kubelet mounts each ConfigMap volume's keys as files under its mountPath and sets each env
variable from its value, a Secret's key (a missing key of an `optional` reference leaves the
variable unset; of a required one, the container does not start) or the downward API. The
service then loads its `--config` files and that environment with `load_config`. Secrets are
given here as their data, so a test can check which Secret each setting comes from.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from hostaffinity.runtime.process.config import Settings, load_config

S = TypeVar("S", bound=Settings)
SecretData = Mapping[str, Mapping[str, str]]  # Secret name -> key -> value


def one(documents: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The only object of that kind (and name, when given)."""
    (found,) = [
        d
        for d in documents
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    return found


def pod_and_container(deployment: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod spec of a Deployment and its (only) container."""
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def _volume(pod: dict[str, Any], name: str) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = pod.get("volumes", [])
    (volume,) = [v for v in volumes if v["name"] == name]
    return volume


def mounted_configmap_files(
    documents: list[dict[str, Any]], pod: dict[str, Any], container: dict[str, Any]
) -> dict[str, str]:
    """Path in the container -> text, for every key of every ConfigMap volume it mounts."""
    files = {}
    for mount in container.get("volumeMounts", []):
        source = _volume(pod, mount["name"]).get("configMap")
        if source is None:
            continue
        data = one(documents, "ConfigMap", source["name"]).get("data", {})
        for key, text in data.items():
            files[str(PurePosixPath(mount["mountPath"]) / key)] = text
    return files


def mounted_secret_key(
    pod: dict[str, Any], container: dict[str, Any], path: str
) -> tuple[str, str, bool]:
    """(Secret name, key, optional) of the Secret volume key the container sees at `path`."""
    wanted = PurePosixPath(path)
    for mount in container.get("volumeMounts", []):
        if wanted.parent != PurePosixPath(mount["mountPath"]):
            continue
        source = _volume(pod, mount["name"]).get("secret")
        if source is None:
            continue
        keys = {item["path"]: item["key"] for item in source.get("items", [])}
        if not source.get("items") or wanted.name in keys:
            key = keys.get(wanted.name, wanted.name)
            return source["secretName"], key, bool(source.get("optional", False))
    raise LookupError(f"no Secret volume of the container holds {path}")


def env_value(env: dict[str, Any], secrets: SecretData, namespace: str) -> str | None:
    """The value the kubelet gives one env entry (None: the variable is left unset)."""
    if "value" in env:
        return str(env["value"])
    source = env["valueFrom"]
    if "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        value = secrets.get(ref["name"], {}).get(ref["key"])
        if value is None and not ref.get("optional", False):
            raise LookupError(f"{env['name']}: Secret {ref['name']} has no key {ref['key']}")
        return value
    if source.get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
        return namespace
    raise LookupError(f"{env['name']}: no value for {source}")


def deployment_config(
    documents: list[dict[str, Any]],
    deployment_name: str,
    record: type[S],
    secrets: SecretData,
    tmp_path: Path,
) -> S:
    """The config record the Deployment's service loads from its mounted --config files and
    its environment, the Secrets holding `secrets`."""
    deployment = one(documents, "Deployment", deployment_name)
    pod, container = pod_and_container(deployment)
    files = mounted_configmap_files(documents, pod, container)
    paths = []
    for index, (flag, value) in enumerate(itertools.pairwise(container.get("args", []))):
        if flag == "--config":
            paths.append(tmp_path / f"{index}-{PurePosixPath(value).name}")
            paths[-1].write_text(files[value], encoding="utf-8")
    namespace = deployment["metadata"]["namespace"]
    values = {e["name"]: env_value(e, secrets, namespace) for e in container.get("env", [])}
    environ = {name: value for name, value in values.items() if value is not None}
    return load_config(record, paths, environ=environ)


def _volume_files(
    documents: list[dict[str, Any]], volume: dict[str, Any], secrets: SecretData
) -> dict[str, str]:
    """Relative path -> text of what the kubelet puts in one ConfigMap, Secret or projected
    volume (a missing key of an optional source is left out; of a required one, the pod does
    not start)."""
    sources = [{k: v} for k, v in volume.items() if k in ("configMap", "secret")]
    sources += volume.get("projected", {}).get("sources", [])
    files: dict[str, str] = {}
    for source in sources:
        if "configMap" in source:
            spec = source["configMap"]
            data = dict(one(documents, "ConfigMap", spec["name"]).get("data", {}))
        else:
            spec = source["secret"]
            data = dict(secrets.get(spec.get("secretName", spec.get("name", "")), {}))
        items = spec.get("items") or [{"key": key, "path": key} for key in data]
        for item in items:
            if item["key"] in data:
                files[item["path"]] = data[item["key"]]
            elif not spec.get("optional", False):
                raise LookupError(f"volume {volume['name']}: no key {item['key']} in {spec}")
    return files


def pod_filesystem(
    documents: list[dict[str, Any]], deployment_name: str, secrets: SecretData, root: Path
) -> tuple[list[str], dict[str, str]]:
    """The Deployment's container as the kubelet starts it, its file system under `root`: every
    key of its ConfigMap, Secret and projected volumes written at root/<mountPath>/<path>.
    Returns its args and its environment (from values, Secrets and the downward API); each path
    into a mount, there and in the files written, is moved under `root`, so that the service
    runs here on what the pod would see."""
    deployment = one(documents, "Deployment", deployment_name)
    pod, container = pod_and_container(deployment)
    mounts = [m["mountPath"].rstrip("/") + "/" for m in container.get("volumeMounts", [])]

    def moved(value: str) -> str:
        """A path into a mount, as seen from here (the whole value, or inside a file)."""
        for mount in mounts:
            value = value.replace(mount, f"{root}{mount}")
        return value

    for mount in container.get("volumeMounts", []):
        volume = _volume(pod, mount["name"])
        for path, text in _volume_files(documents, volume, secrets).items():
            target = root / mount["mountPath"].lstrip("/") / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(moved(text), encoding="utf-8")

    namespace = deployment["metadata"]["namespace"]
    values = {e["name"]: env_value(e, secrets, namespace) for e in container.get("env", [])}
    environ = {name: moved(value) for name, value in values.items() if value is not None}
    return [moved(arg) for arg in container.get("args", [])], environ

"""Discovery: `/version`, `/api`, `/apis` and each group version's resource list, so that
kubectl (which asks these before anything else) can talk to the double.

The shapes are kube-apiserver v1.36's, from the upstream types: `version.Info`
(k8s.io/apimachinery pkg/version/types.go: the binary's and the emulated version, the build),
`metav1.APIVersions`, `metav1.APIGroupList` and `metav1.APIResourceList`
(k8s.io/apimachinery pkg/apis/meta/v1/types.go). Only the unaggregated (legacy) form is served:
a client that asks for the aggregated `apidiscovery.k8s.io/v2` form first, as kubectl does, gets
`application/json` back and falls back to reading each group version, as it does with a server
that has aggregated discovery turned off (client-go discovery/discovery_client.go,
`fetchGroupsAndResources`).

What is listed is what `resources.py` serves, and nothing else: a kind the double does not store
is not discoverable, so kubectl refuses it ("the server doesn't have a resource type") instead of
the double pretending to keep it.
"""

from __future__ import annotations

from typing import Any

from .resources import RESOURCES, Resource

# The kube-apiserver the contract tests recorded (tests/fixtures/README.md).
SERVER_VERSION = "v1.36.2"
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
# The short names the real server lists (each kind's rest storage `ShortNames()`).
_SHORT_NAMES = {
    "nodes": ["no"], "pods": ["po"], "namespaces": ["ns"], "events": ["ev"],
    "serviceaccounts": ["sa"], "configmaps": ["cm"], "services": ["svc"],
    "deployments": ["deploy"], "statefulsets": ["sts"], "poddisruptionbudgets": ["pdb"],
    "networkpolicies": ["netpol"], "virtualmachineinstances": ["vmi", "vmis"],
    "virtualmachines": ["vm", "vms"],
}  # fmt: skip
# Subresources and the verbs the real server lists for them (pkg/registry/*/rest storage).
_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "binding": ["create"],
    "eviction": ["create"],
    "token": ["create"],
    "scale": ["get", "patch", "update"],
}
# The kind a subresource takes and returns, where it is not its resource's own: the real server
# lists its group and version too when they differ from the resource's (the storage's
# GroupVersionKind, apiserver pkg/endpoints/installer.go). kubectl drain evicts only when
# `pods/eviction` is listed as policy/v1 Eviction (kubectl pkg/drain/drain.go
# CheckEvictionSupport); otherwise it falls back to deleting the pods.
_SUBRESOURCE_KINDS = {
    "binding": ("", "", "Binding"),
    "eviction": ("policy", "v1", "Eviction"),
    "token": ("authentication.k8s.io", "v1", "TokenRequest"),
    "scale": ("autoscaling", "v1", "Scale"),
}


def version_info() -> dict[str, str]:
    """`GET /version`: version.Info of a v1.36.2 server built by upstream's release tooling."""
    major, minor, _patch = SERVER_VERSION.removeprefix("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": str(int(minor) - 1),
        "gitVersion": SERVER_VERSION,
        "gitCommit": "0" * 40,
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def answer(path: str, server_address: str) -> dict[str, Any] | None:
    """The discovery document at `path`, or None when `path` is not a discovery path."""
    parts = [p for p in path.split("/") if p]
    if parts == ["version"]:
        return version_info()
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
            ],
        }
    if parts == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": _groups()}
    if parts == ["api", "v1"]:
        return _resource_list("", "v1")
    if len(parts) == 3 and parts[0] == "apis":
        versions = {(r.group, r.version) for r in RESOURCES}
        if (parts[1], parts[2]) in versions:
            return _resource_list(parts[1], parts[2])
    return None


def _groups() -> list[dict[str, Any]]:
    """Every named group, each with its one served version (the preferred one)."""
    groups: dict[str, list[str]] = {}
    for resource in RESOURCES:
        if resource.group:
            versions = groups.setdefault(resource.group, [])
            if resource.version not in versions:
                versions.append(resource.version)
    listed = []
    for name, versions in groups.items():
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        listed.append({"name": name, "versions": entries, "preferredVersion": entries[0]})
    return listed


def _resource_list(group: str, version: str) -> dict[str, Any]:
    """metav1.APIResourceList of one group version: each resource, then its subresources."""
    listed: list[dict[str, Any]] = []
    for resource in RESOURCES:
        if (resource.group, resource.version) != (group, version):
            continue
        listed.append(_entry(resource, resource.plural, _VERBS, singular=True))
        for sub in sorted(resource.subresources):
            listed.append(_subresource_entry(resource, sub))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": listed,
    }


def _entry(
    resource: Resource, name: str, verbs: list[str], *, singular: bool = False
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "singularName": resource.kind.lower() if singular else "",
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": verbs,
    }
    if singular and name in _SHORT_NAMES:
        entry["shortNames"] = _SHORT_NAMES[name]
    return entry


def _subresource_entry(resource: Resource, sub: str) -> dict[str, Any]:
    entry = _entry(resource, f"{resource.plural}/{sub}", _SUBRESOURCE_VERBS[sub])
    group, version, kind = _SUBRESOURCE_KINDS.get(sub, ("", "", resource.kind))
    entry["kind"] = kind
    if version:
        entry = {**entry, "group": group, "version": version}
    return entry

"""Which Kubernetes cluster this install serves: the identity that keeps installs sharing one
vCenter apart (DRS names, events, ownership records).

In order: what the operator set (`shared.cluster.name`); the multi-cluster API's `id.k8s.io`
ClusterProperty (KEP-2149, kubernetes/enhancements keps/sig-multicluster/2149-clusterid: a
cluster-scoped `about.k8s.io` object whose `spec.value` is an RFC-1123 DNS label, unique in its
ClusterSet and immutable while the cluster is a member), or the About API's later name for it,
`cluster.clusterset.k8s.io` (kubernetes-sigs/sig-multicluster-site, "ClusterSet"), at the CRD's
served versions v1beta1 then v1alpha1 (kubernetes-sigs/about-api); else the `kube-system`
Namespace's UID, which every cluster has and which lives as long as the cluster.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Final, Literal

from kubernetes_asyncio.client.exceptions import ApiException

from hostaffinity.runtime.kube.client import CALL_ERRORS, NAMESPACES, KubeClient, ResourceRef

CLUSTER_PROPERTIES: Final = (
    ResourceRef("about.k8s.io", "v1beta1", "clusterproperties"),
    ResourceRef("about.k8s.io", "v1alpha1", "clusterproperties"),
)
CLUSTER_ID_PROPERTIES: Final = ("id.k8s.io", "cluster.clusterset.k8s.io")
IDENTITY_NAMESPACE: Final = "kube-system"
# A ClusterProperty read refused for these means "not there for us": no CRD (404), or not granted.
_ABSENT: Final = frozenset({403, 404})
_RETRY_INITIAL_S: Final = 0.5
# One GET per try, once per process start: a stand-by started during an API outage is the next
# leader, so it asks again at the Lease's retry pace (2 s) rather than backing off further (at
# 10 s, one took over 8 s after the API came back in the campaign).
_RETRY_MAX_S: Final = 2.0
_log = logging.getLogger(__name__)

IdentitySource = Literal["configured", "cluster-property", "kube-system-uid"]


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    name: str
    source: IdentitySource

    def describe(self) -> str:
        return f"{self.name} ({self.source})"


class ClusterIdentityUnknown(RuntimeError):
    """The API refused what the identity is read from, and no name is configured."""


async def read_cluster_identity(kube: KubeClient, configured: str) -> ClusterIdentity:
    """The identity, reading the API until it answers (a service may start before it does)."""
    if configured:
        return ClusterIdentity(configured, "configured")
    delay = _RETRY_INITIAL_S
    while True:
        try:
            return await _read_once(kube)
        except ApiException as err:
            if err.status in (401, 403):
                raise ClusterIdentityUnknown(
                    f"cannot tell which cluster this is: the API server refused the read "
                    f"({err.status}); set shared.cluster.name, or grant get on "
                    f"namespaces/{IDENTITY_NAMESPACE}"
                ) from err
            _log.warning("reading the cluster identity failed (%s); retrying", err.status)
        except CALL_ERRORS as err:
            _log.warning("reading the cluster identity failed (%s); retrying", err or repr(err))
        await asyncio.sleep(delay)
        delay = min(_RETRY_MAX_S, delay * 2)


async def _read_once(kube: KubeClient) -> ClusterIdentity:
    for name in CLUSTER_ID_PROPERTIES:
        value = await _cluster_property(kube, name)
        if value:
            return ClusterIdentity(value, "cluster-property")
    namespace = json.loads(await kube.request("GET", NAMESPACES.path(IDENTITY_NAMESPACE)))
    uid = (namespace.get("metadata") or {}).get("uid")
    if not isinstance(uid, str) or not uid:
        raise ClusterIdentityUnknown(
            f"Namespace {IDENTITY_NAMESPACE} has no uid; set shared.cluster.name"
        )
    return ClusterIdentity(uid, "kube-system-uid")


async def _cluster_property(kube: KubeClient, name: str) -> str:
    """The property's `spec.value`, or "" where the cluster has none (no CRD, not granted)."""
    for resource in CLUSTER_PROPERTIES:
        try:
            found = json.loads(await kube.request("GET", resource.path(name)))
        except ApiException as err:
            if err.status in _ABSENT:
                continue
            raise
        value = (found.get("spec") or {}).get("value")
        if isinstance(value, str) and value:
            return value
        _log.warning("ClusterProperty %s has no spec.value; not used", name)
    return ""

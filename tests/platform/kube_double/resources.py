"""The resources the double serves, with the per-resource facts the real server encodes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Resource:
    """One REST resource: its identity and the behaviours that differ between resources."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()
    field_labels: frozenset[str] = frozenset()
    custom: bool = False
    has_generation: bool = False
    storage: str = ""
    managed_fields: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_key(self) -> str:
        """Resources sharing one storage (core and events.k8s.io Events) share this key."""
        return self.storage or self.group_resource

    @property
    def status_subresource(self) -> bool:
        return "status" in self.subresources


_POD_FIELDS = frozenset(
    {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)


def _core(plural: str, kind: str, namespaced: bool, **kw: object) -> Resource:
    return Resource("", "v1", plural, kind, namespaced, **kw)  # type: ignore[arg-type]


def _kubevirt(
    plural: str, kind: str, *, group: str = "kubevirt.io/v1", status: bool = True
) -> Resource:
    """A KubeVirt custom resource, namespaced, with metadata.generation."""
    api_group, version = group.split("/")
    subresources = frozenset({"status"}) if status else frozenset()
    return Resource(
        api_group, version, plural, kind, True,
        subresources=subresources, custom=True, has_generation=True,
    )  # fmt: skip


RESOURCES: tuple[Resource, ...] = (
    _core(
        "nodes",
        "Node",
        False,
        subresources=frozenset({"status"}),
        field_labels=frozenset({"spec.unschedulable"}),
    ),
    _core(
        "pods",
        "Pod",
        True,
        subresources=frozenset({"status", "binding", "eviction"}),
        field_labels=_POD_FIELDS,
        has_generation=True,
    ),
    _core(
        "namespaces",
        "Namespace",
        False,
        subresources=frozenset({"status"}),
        field_labels=frozenset({"status.phase"}),
    ),
    _core("events", "Event", True, field_labels=_EVENT_FIELDS, storage="events"),
    _core(
        "serviceaccounts",
        "ServiceAccount",
        True,
        subresources=frozenset({"token"}),
        managed_fields=False,
    ),
    _core("secrets", "Secret", True),
    Resource("events.k8s.io", "v1", "events", "Event", True, storage="events"),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
    Resource(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        subresources=frozenset({"status"}),
        has_generation=True,
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
        has_generation=True,
    ),
    # The built-in kinds hostaffinity's install manifests hold (k8s/, the chart), so that
    # `kubectl apply` of an install page can run against the double. Stored as sent: no
    # controller acts on them (a Deployment makes no pods), as on a server without its
    # controller-manager. Subresources and generation as the real server has them
    # (pkg/registry/<group>/<kind>/storage).
    _core("configmaps", "ConfigMap", True),
    _core("services", "Service", True, subresources=frozenset({"status"})),
    *(
        Resource(group, "v1", plural, kind, True, subresources=subresources, has_generation=True)
        for group, plural, kind, subresources in (
            ("apps", "deployments", "Deployment", frozenset({"status", "scale"})),
            ("apps", "statefulsets", "StatefulSet", frozenset({"status", "scale"})),
            ("batch", "jobs", "Job", frozenset({"status"})),
        )
    ),
    Resource(
        "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, has_generation=True
    ),
    *(
        Resource("rbac.authorization.k8s.io", "v1", plural, kind, namespaced)
        for plural, kind, namespaced in (
            ("roles", "Role", True),
            ("rolebindings", "RoleBinding", True),
            ("clusterroles", "ClusterRole", False),
            ("clusterrolebindings", "ClusterRoleBinding", False),
        )
    ),
    *(
        Resource("admissionregistration.k8s.io", "v1", plural, kind, False, has_generation=True)
        for plural, kind in (
            ("mutatingadmissionpolicies", "MutatingAdmissionPolicy"),
            ("mutatingadmissionpolicybindings", "MutatingAdmissionPolicyBinding"),
        )
    ),
    # The Prometheus operator's and cert-manager's kinds the monitoring and cert-manager
    # variants hold, served as when their CRDs are installed (the install page asks for them
    # first); stored unvalidated.
    *(
        Resource(group, "v1", plural, kind, True, custom=True, has_generation=True)
        for group, plural, kind in (
            ("monitoring.coreos.com", "podmonitors", "PodMonitor"),
            ("monitoring.coreos.com", "prometheusrules", "PrometheusRule"),
            ("cert-manager.io", "issuers", "Issuer"),
            ("cert-manager.io", "certificates", "Certificate"),
        )
    ),
    # KubeVirt v1.9's CRDs (kubevirt pkg/virt-operator/resource/generate/components/crds.go):
    # all but the VMI have a status subresource (VMIRS and pools a scale one too, not served
    # here); a pool is pool.kubevirt.io, served as v1beta1 (its storage version).
    _kubevirt("virtualmachineinstances", "VirtualMachineInstance", status=False),
    _kubevirt("virtualmachines", "VirtualMachine"),
    _kubevirt("virtualmachineinstancereplicasets", "VirtualMachineInstanceReplicaSet"),
    _kubevirt("virtualmachinepools", "VirtualMachinePool", group="pool.kubevirt.io/v1beta1"),
    _kubevirt("kubevirts", "KubeVirt"),
    _kubevirt("virtualmachineinstancemigrations", "VirtualMachineInstanceMigration"),
    # The multi-cluster About API's ClusterProperty (KEP-2149), cluster-scoped, served at its
    # storage version (kubernetes-sigs/about-api config/crd/about.k8s.io_clusterproperties.yaml).
    Resource(
        "about.k8s.io",
        "v1beta1",
        "clusterproperties",
        "ClusterProperty",
        False,
        subresources=frozenset({"status"}),
        custom=True,
        has_generation=True,
    ),
)

_BY_PATH: dict[tuple[str, str, str], Resource] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}
_BY_KIND: dict[tuple[str, str], Resource] = {}
for _r in RESOURCES:
    _BY_KIND.setdefault((_r.api_version, _r.kind), _r)


def lookup(group: str, version: str, plural: str) -> Resource | None:
    return _BY_PATH.get((group, version, plural))


def for_kind(api_version: str, kind: str) -> Resource:
    """The resource an object of this apiVersion/kind is stored as (for seeding)."""
    return _BY_KIND[(api_version, kind)]


@dataclass
class Route:
    """A parsed request path."""

    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None = None
    extra: list[str] = field(default_factory=list)

"""Subjects, buckets, streams, label and annotation keys: fixed so all parties agree."""

# Node labels the node-labeller owns. LABEL_LEGACY_HOST is the archived VMware plugin's key,
# kept so that manifests written for that plugin keep working.
LABEL_ESXI_HOST = "hostaffinity.io/esxi-host"
LABEL_VSPHERE_CLUSTER = "hostaffinity.io/vsphere-cluster"
LABEL_DATACENTER = "hostaffinity.io/datacenter"
LABEL_LEGACY_HOST = "alpha.cna.vmware.com/host"

# Failure domains above the host. Zone and region are Kubernetes' well-known keys, which the vSphere
# cloud provider also sets from vSphere tags (k8s.io/api/core/v1 well_known_labels.go); the rack
# is ours: a level between the host and the zone, from a tag category of the site's choosing.
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_RACK = "hostaffinity.io/rack"

# Node annotation: the well-known failure-domain keys the node-labeller set itself and keeps true
# (comma-separated). A value it did not set (the cloud provider's) is never overwritten.
ANNOTATION_FAILURE_DOMAIN_LABELS = "hostaffinity.io/failure-domain-labels"

# Node annotations: the full host name when the label value had to be derived, and the VM moid.
ANNOTATION_ESXI_HOST_NAME = "hostaffinity.io/esxi-host-name"
ANNOTATION_VM = "hostaffinity.io/vm"

# Lease annotation: the leader's readiness, part by part (schema/readiness.py), written at each
# renewal, so that `hostaffinity status` shows a partial outage (one vCenter of several away).
ANNOTATION_READINESS = "hostaffinity.io/readiness"

# Pod annotation that opts a pod into reading kubernetes.io/hostname anti-affinity as ESXi-host
# anti-affinity.
POD_PHYSICAL_ANTI_AFFINITY = "hostaffinity.io/physical-anti-affinity"

TOPOLOGY_BUCKET = "hostaffinity-topology"
DRS_BUCKET = "hostaffinity-drs"
EVENTS_STREAM = "HOSTAFFINITY_EVENTS"
EVENTS_SUBJECT_PREFIX = "hostaffinity.events"
DLQ_STREAM = "HOSTAFFINITY_DLQ"
DLQ_SUBJECT_PREFIX = "hostaffinity.dlq"

NODE_KEY_PREFIX = "node."
HOST_KEY_PREFIX = "host."
# In the topology bucket: a node's events of a stored change not yet published (the
# node-labeller's durable outbox); readers of placements never see them (`node.>`, `host.>`).
NODE_OUTBOX_KEY_PREFIX = "outbox.node."
DRS_RULE_KEY_PREFIX = "rule."
# `drs.rules.applied` events kept until NATS acknowledged them (the translator's durable outbox):
# one key per vCenter holding them all, so the bucket's keys stay bounded (a deleted key leaves a
# marker for good). 0.1.0 kept one key per event under `outbox.<vcenter>.`: read once, then gone.
DRS_OUTBOX_KEY_PREFIX = "outbox.drs."
LEGACY_DRS_OUTBOX_KEY_PREFIX = "outbox."
# vSphere HA settings of each cluster holding rules of ours (ClusterHaSettings): the HA audit.
DRS_HA_KEY_PREFIX = "ha."
# What needs attention in each vSphere cluster (DrsClusterReport): status, explain, alerts.
DRS_REPORT_KEY_PREFIX = "report."

# The fleet (fleet.py): an install's own placement summary, and the fleet view (on the hub, every
# install's summary and topology; on an install, the hub's view mirrored into its own domain).
PLACEMENTS_BUCKET = "hostaffinity-placements"
FLEET_BUCKET = "hostaffinity-fleet"
WORKLOAD_KEY_PREFIX = "workload."
# On the hub: who owns each fleet group's DRS rule (fleet_rules.FleetRuleLease), one key per
# rule, every value expiring with the bucket's max age unless its holder renews it.
FLEET_LEASES_BUCKET = "hostaffinity-fleet-leases"


def node_key(node_name: str) -> str:
    """KV key of a node's placement. Node names contain dots: watch `node.>`, never `node.*`."""
    return NODE_KEY_PREFIX + node_name


def node_outbox_key(node_name: str) -> str:
    """KV key of the events the node-labeller keeps for a node until they are published."""
    return NODE_OUTBOX_KEY_PREFIX + node_name


def host_key(host_id: str) -> str:
    """KV key of an ESXi host's record; `host_id` is what `host_id()` makes of it."""
    return HOST_KEY_PREFIX + host_id


def host_id(host_moid: str, vcenter: str | None = None) -> str:
    """What follows `host.` in an ESXi host's KV key: its moid where the node-labeller works
    with one vCenter, `<vcenter>.<moid>` where it works with several (moids repeat across
    vCenters: `host-12` in both). Readers take the host's identity from the value
    (`EsxiHost.vcenter`, `.moid`), never from the key."""
    return host_moid if vcenter is None else f"{_key_safe(vcenter)}.{host_moid}"


def event_subject(event_type: str) -> str:
    """Subject an event of this type is published on."""
    return f"{EVENTS_SUBJECT_PREFIX}.{event_type}"


def dlq_subject(service: str) -> str:
    """Subject where a service parks the messages it could not decode."""
    return f"{DLQ_SUBJECT_PREFIX}.{service}"


def drs_rule_key(vcenter: str, cluster_moid: str, name: str) -> str:
    """KV key of a DRS rule's or group's ownership record in `hostaffinity-drs`.

    Characters a KV key cannot hold (a `:` in `host:port`, spaces) become `-`.
    """
    parts = (_key_safe(vcenter), _key_safe(cluster_moid), _key_safe(name))
    return DRS_RULE_KEY_PREFIX + ".".join(parts)


def drs_outbox_key(vcenter: str) -> str:
    """KV key of the `drs.rules.applied` events of a vCenter the drs-translator keeps until they
    are published (one list per vCenter)."""
    return f"{DRS_OUTBOX_KEY_PREFIX}{_key_safe(vcenter)}"


def legacy_drs_outbox_prefix(vcenter: str) -> str:
    """Prefix of the per-event keys 0.1.0 kept a vCenter's announcements under."""
    return f"{LEGACY_DRS_OUTBOX_KEY_PREFIX}{_key_safe(vcenter)}."


def drs_ha_key(vcenter: str, cluster_moid: str) -> str:
    """KV key of a cluster's vSphere HA settings in `hostaffinity-drs`."""
    return f"{DRS_HA_KEY_PREFIX}{_key_safe(vcenter)}.{_key_safe(cluster_moid)}"


def workload_key(namespace: str, kind: str, name: str) -> str:
    """KV key of a workload's WorkloadPlacement in `hostaffinity-placements`."""
    return f"{WORKLOAD_KEY_PREFIX}{_key_safe(namespace)}.{_key_safe(kind)}.{_key_safe(name)}"


def fleet_key(install: str, key: str) -> str:
    """Where an install's placements or topology key is kept in `hostaffinity-fleet`: under the
    install's token (drs_names.install_token), so that installs never overwrite each other."""
    return f"{_key_safe(install)}.{key}"


def fleet_lease_key(vcenter_uuid: str, cluster_moid: str, rule: str) -> str:
    """Key of a fleet rule's lease in `hostaffinity-fleet-leases`: the vCenter by its instance
    UUID (installs may name one vCenter differently), the vSphere cluster and the rule's name
    (drs_names.fleet_rule_name, which stands for the group there)."""
    return f"{_key_safe(vcenter_uuid)}.{_key_safe(cluster_moid)}.{_key_safe(rule)}"


def drs_report_key(vcenter: str, cluster_moid: str) -> str:
    """KV key of a vSphere cluster's DrsClusterReport in `hostaffinity-drs`."""
    return f"{DRS_REPORT_KEY_PREFIX}{_key_safe(vcenter)}.{_key_safe(cluster_moid)}"


def _key_safe(part: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_=/.") else "-" for c in part)


# Pod annotation asking for a topology spread over ESXi hosts; the value is the maxSkew.
POD_SPREAD_ACROSS_HOSTS = "hostaffinity.io/spread-across-hosts"

# KubeVirt's label on every virt-launcher pod, the first one and each migration target alike: the
# uid of the VMI it runs (kubevirt/kubevirt pkg/virt-controller/services/template.go,
# podLabels[v1.CreatedByLabel] = string(vmi.UID)). A host-key term read or added by us leaves out
# pods with the same value, so a VM's own source pod never counts against its migration target.
LABEL_KUBEVIRT_VMI_UID = "kubevirt.io/created-by"

# KubeVirt's label on a migration's target virt-launcher pod only: the migration's uid
# (kubevirt/kubevirt staging/src/kubevirt.io/api/core/v1/types.go MigrationJobLabel). A host-key
# spread of a target leaves its own VM out of the count: the source it replaces is leaving.
LABEL_KUBEVIRT_MIGRATION_JOB = "kubevirt.io/migrationJobUID"

"""What installs share through the fleet hub: each install's placement summary, and the fleet view
every install reads back.

Each install's bus holds its own summary in the KV bucket `hostaffinity-placements`
(`workload.<namespace>.<kind>.<name>` → `WorkloadPlacement`, written by the descheduler, which
sees every pod and the topology). The hub sources every install's summary and topology into its
`hostaffinity-fleet` bucket (keys prefixed with the install's token, `fleet_key`), and each
install mirrors that bucket back into its own domain, where its services read it: the hub is
never on an install's path, a mirror only goes stale while the hub is away.

A host is known across installs by `host_id` (`fleet_host_id`): the same ESXi host seen through
two installs' node-labellers gets the same id whatever each install calls its vCenter.
"""

from typing import Final

import msgspec

# Pods with this label are kept on different ESXi hosts from every other pod of the same group,
# in whatever cluster they run (opt-in, cross-cluster host anti-affinity).
LABEL_FLEET_GROUP = "hostaffinity.io/fleet-group"

# JetStream domains: the hub's, and each install's (its bus's own, named for its install token).
# NATS keeps the JetStream of each side of a leaf-node link apart by domain, and a stream in one
# domain reaches another's through its API prefix `$JS.<domain>.API`. The `install-` part keeps
# an install's domain from ever being the hub's, whatever its token.
HUB_DOMAIN: Final = "hostaffinity-hub"


def install_domain(install: str) -> str:
    """The JetStream domain of the install whose token is `install`."""
    return f"hostaffinity-install-{install}"


def jetstream_api(domain: str) -> str:
    """The prefix under which a domain's JetStream API answers across leaf-node links."""
    return f"$JS.{domain}.API"


def hub_deliver_prefix(install: str) -> str:
    """Where the hub's sourcing consumers on one install deliver (`<prefix>.S.<id>`): a subject
    of that install's own, so its hub credentials may publish there and nowhere another's are."""
    return f"hostaffinity.fleet.from.{install}"


def mirror_deliver_prefix(install: str) -> str:
    """Where the hub delivers the fleet view one install mirrors (`<prefix>.M.<id>`)."""
    return f"hostaffinity.fleet.to.{install}"


class ReplicaPlacement(msgspec.Struct, frozen=True, kw_only=True):
    """One replica of a workload and the ESXi host under its node (empty while not placed)."""

    pod: str
    node: str = ""
    host_id: str = ""
    host_name: str = ""
    vcenter: str = ""
    vsphere_cluster_moid: str = ""
    vm_moid: str = ""


class WorkloadPlacement(msgspec.Struct, frozen=True, kw_only=True):
    """Where one workload's replicas run: the value of `workload.<namespace>.<kind>.<name>` in an
    install's `hostaffinity-placements` bucket. `cluster` is the install's cluster identity,
    `fleet_group` the pods' `hostaffinity.io/fleet-group` label (empty: none), `replicas` sorted
    by pod name."""

    cluster: str
    namespace: str
    kind: str
    name: str
    fleet_group: str = ""
    replicas: list[ReplicaPlacement] = []
    observed_at: str = ""


def fleet_host_id(vcenter_uuid: str, host_moid: str, host_name: str) -> str:
    """An ESXi host's identity across installs: vCenter's instance UUID and the host's moid where
    the UUID is known (installs may name one vCenter differently; moids repeat across vCenters),
    else the host's name."""
    return f"{vcenter_uuid}/{host_moid}" if vcenter_uuid else host_name

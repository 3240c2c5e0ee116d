"""The node-labeller's configuration record (YAML + HOSTAFFINITY_* environment)."""

from typing import Literal

from hostaffinity.runtime.config import LeaderElectedSettings
from hostaffinity.runtime.vcenter import VCenterSettings


class NodeLabellerConfig(LeaderElectedSettings, frozen=True, kw_only=True):
    """Everything the node-labeller reads; `vcenter` has no defaults for host and credentials."""

    vcenter: VCenterSettings
    # A name for this vCenter in placements and events (defaults to its host).
    vcenter_name: str = ""
    # How to match a node whose providerID and systemUUID name no VM: by VM name, by the guest's
    # hostname, or not at all.
    match_fallback: Literal["vm-name", "guest-hostname", "none"] = "vm-name"
    # Label patches in flight at once during a full resync (first labelling, re-login).
    patch_concurrency: int = 32

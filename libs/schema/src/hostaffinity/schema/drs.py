"""Values of the `hostaffinity-drs` KV bucket: what the drs-translator owns in vCenter.

Only a DRS rule or group that carries our name prefix *and* has a record here is ever edited or
removed (ARCHITECTURE.md "Safety"). The record is written before vCenter is asked (`pending`), so
a translator killed between the reconfigure and the confirmation finds its rule again on restart
instead of leaving an orphan or adding a twin.
"""

from typing import Final, Literal

import msgspec

# Name prefix of every rule and group the drs-translator creates.
DRS_NAME_PREFIX: Final = "hostaffinity-"

DrsObjectKind = Literal["vm-anti-affinity", "vm-affinity", "vm-group", "host-group", "vm-host"]
DrsRecordState = Literal["pending", "applied", "removing"]


class DrsOwnership(msgspec.Struct, frozen=True, kw_only=True):
    """One DRS rule or group we created: the value of `rule.<vcenter>.<cluster-moid>.<name>`.

    `vms`/`hosts` are managed object ids, sorted. A VM-Host rule names its groups in `vm_group`
    and `host_group`. `pods` are the `namespace/name`s that asked for it, `reason` says which term
    in words. `state` is `pending` from the moment we decide to write until vCenter confirmed,
    `applied` after, `removing` while a removal is in flight. `held_because` is set while the
    rule is held (disabled in vCenter, record and name kept) so that a host can enter maintenance
    mode, and says why; it is empty while DRS enforces the rule.
    """

    vcenter: str
    cluster_moid: str
    name: str
    kind: DrsObjectKind
    vms: list[str] = []
    hosts: list[str] = []
    vm_group: str = ""
    host_group: str = ""
    mandatory: bool = False
    pods: list[str] = []
    reason: str = ""
    state: DrsRecordState = "pending"
    recorded_at: str = ""
    applied_at: str = ""
    held_because: str = ""

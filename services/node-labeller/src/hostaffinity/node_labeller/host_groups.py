"""Racks from DRS host groups: a host in the group `<prefix><rack>` is in that rack.

Read with a short SOAP session of its own, beside the tags, every `refresh_seconds`: the watch
does not follow clusters' `configurationEx`, which the drs-translator's own rules change often
and which would re-examine every node each time.
"""

from typing import Any

from pyVim.connect import Disconnect
from pyVmomi import vim, vmodl

from hostaffinity.runtime.vcenter.session import VCenterError, connect, where
from hostaffinity.runtime.vcenter.settings import VCenterSettings

# host moid -> the racks its host groups name
HostGroupRacks = dict[str, tuple[str, ...]]


class HostGroupReadError(VCenterError):
    """The clusters' host groups could not be read; the message says which vCenter and why."""


def read_host_group_racks(settings: VCenterSettings, prefix: str) -> HostGroupRacks:
    """Blocking: every cluster's host groups named with `prefix`, by host."""
    try:
        si = connect(settings)
    except (VCenterError, OSError) as error:
        raise HostGroupReadError(f"host groups: {error}") from error
    try:
        return _racks(si.RetrieveContent(), prefix)
    except (vmodl.MethodFault, OSError) as error:
        message = getattr(error, "msg", "") or repr(error)
        raise HostGroupReadError(
            f"vCenter {where(settings)}: reading host groups failed: {message}"
        ) from error
    finally:
        Disconnect(si)  # type: ignore[no-untyped-call]


def _racks(content: Any, prefix: str) -> HostGroupRacks:
    view = content.viewManager.CreateContainerView(
        content.rootFolder, [vim.ClusterComputeResource], True
    )
    racks: dict[str, set[str]] = {}
    try:
        for cluster in view.view:
            for group in cluster.configurationEx.group or []:
                rack = group.name.removeprefix(prefix)
                if (
                    isinstance(group, vim.cluster.HostGroup)
                    and group.name.startswith(prefix)
                    and rack
                ):
                    for host in group.host or []:
                        racks.setdefault(host._moId, set()).add(rack)
    finally:
        view.Destroy()
    return {host: tuple(sorted(names)) for host, names in racks.items()}

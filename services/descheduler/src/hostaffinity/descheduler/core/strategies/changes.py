"""The cluster changes a plugin can register for (our kube-scheduler ClusterEvent), so that a
change no plugin needs starts no cycle."""

from __future__ import annotations

import enum
from typing import Final


class Change(enum.Flag):
    """A cluster change that may create a violation or make room to resolve one.

    Each plugin declares the changes it reacts to, as a kube-scheduler plugin declares its
    cluster events (EventsToRegister, pkg/scheduler/framework/interface.go); a change no plugin
    registered starts no cycle.
    """

    NODE_ADDED = enum.auto()
    NODE_UNCORDONED = enum.auto()
    NODE_READY = enum.auto()
    NODE_TAINTS = enum.auto()
    NODE_LABELS = enum.auto()
    POD_ASSIGNED = enum.auto()
    POD_LABELS = enum.auto()
    # A pod's affinity or node selector, or its VMI's for a virt-launcher pod.
    POD_AFFINITY = enum.auto()
    MIGRATION_FINISHED = enum.auto()
    # The KubeVirt CR's parallel migration limits changed (a raised one frees slots).
    MIGRATION_LIMITS = enum.auto()


# A pod that lands on a node, or whose labels now match a strategy's labelSelector, is new to
# every strategy that scopes pods (PodScope).
SCOPE_CHANGES: Final = Change.POD_ASSIGNED | Change.POD_LABELS

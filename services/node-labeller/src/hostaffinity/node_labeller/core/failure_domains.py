"""Zone, region and rack of an ESXi host from vSphere tags, and the node labels they call for.

Zone and region are computed as the vSphere cloud provider computes them
(kubernetes/cloud-provider-vsphere pkg/common/connectionmanager/zones.go, LookupZoneByMoref): the
host's own tags first, then those of each ancestor (cluster, folders, datacenter, root folder); a
tag of the zone or region category sets that value, a farther object's tag replacing a nearer
one's, until both a zone and a region are known. Where the cloud provider would take whichever of
several tags of one category on one object vCenter lists last, this module gives no value and says
so. The rack is the nearest object's tag of the rack category, else the DRS host group the host
is in whose name has the configured prefix.

The zone and region keys are Kubernetes' well-known ones, which the cloud provider may have set
already: the labeller only writes a key it set itself (listed in the node's
ANNOTATION_FAILURE_DOMAIN_LABELS) or one that is absent; a different value set by someone else is
a conflict, reported and left alone. An equal value is adopted: kept true from then on.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hostaffinity.node_labeller.config import FailureDomainSettings
from hostaffinity.node_labeller.core.inventory import Inventory
from hostaffinity.schema import (
    ANNOTATION_FAILURE_DOMAIN_LABELS,
    LABEL_REGION,
    LABEL_ZONE,
    label_value,
)

# vCenter's tags: object moid -> category name -> the names of its tags in that category.
TagIndex = Mapping[str, Mapping[str, Sequence[str]]]

# The well-known keys whose values may come from someone else (the cloud provider).
SHARED_KEYS = (LABEL_ZONE, LABEL_REGION)


@dataclass(frozen=True, slots=True)
class FailureDomains:
    """A host's domains as label values ("" where none), and what could not be decided."""

    zone: str = ""
    region: str = ""
    rack: str = ""
    # Human-readable reasons a value was left empty (several tags of one category on an object).
    ambiguities: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Conflict:
    """A well-known label someone else set to a value vCenter's tags contradict."""

    key: str
    node_value: str
    tagged_value: str


@dataclass(slots=True)
class SharedLabelPlan:
    """What to write for the shared keys: label changes (None removes), the ownership
    annotation's new value (None: unchanged, "": remove), and the conflicts to report."""

    labels: dict[str, str | None] = field(default_factory=dict)
    owned_annotation: str | None = None
    conflicts: list[Conflict] = field(default_factory=list)


def host_failure_domains(
    host_moid: str,
    inventory: Inventory,
    tags: TagIndex,
    settings: FailureDomainSettings,
    group_racks: Sequence[str] = (),
) -> FailureDomains:
    """The zone, region and rack vCenter's tags give `host_moid`; `group_racks` are the racks
    its host groups name."""
    chain = inventory.ancestry(host_moid)
    ambiguities: list[str] = []
    values = _cloud_provider_walk(chain, tags, settings, ambiguities)
    rack_unclear: list[str] = []
    rack = _nearest(chain, tags, settings.rack_category, rack_unclear)
    if not rack and not rack_unclear and group_racks:
        if len(group_racks) == 1:
            rack = group_racks[0]
        else:
            names = ", ".join(f"{settings.rack_host_group_prefix}{r}" for r in sorted(group_racks))
            rack_unclear.append(f"{host_moid} is in {len(group_racks)} rack host groups ({names})")
    ambiguities.extend(rack_unclear)
    return FailureDomains(
        zone=label_value(values.get(settings.zone_category, "")),
        region=label_value(values.get(settings.region_category, "")),
        rack=label_value(rack),
        ambiguities=tuple(ambiguities),
    )


def _cloud_provider_walk(
    chain: Sequence[str],
    tags: TagIndex,
    settings: FailureDomainSettings,
    ambiguities: list[str],
) -> dict[str, str]:
    """The cloud provider's walk: nearest object first, a later tag replaces an earlier one, stop
    once both the zone and the region category have a value. Several tags of a category on one
    object give it no value (None here) unless a farther object's tag replaces it."""
    wanted = [c for c in (settings.zone_category, settings.region_category) if c]
    found: dict[str, str | None] = {}
    unclear: dict[str, str] = {}
    for moid in chain:
        for category in wanted:
            names = tags.get(moid, {}).get(category, ())
            if len(names) > 1:
                found[category] = None
                unclear[category] = _ambiguity(moid, category, names)
            elif names:
                found[category] = names[0]
                unclear.pop(category, None)
        if len(wanted) == 2 and len(found) == 2:
            break
    ambiguities.extend(unclear.values())
    return {category: value for category, value in found.items() if value is not None}


def _nearest(chain: Sequence[str], tags: TagIndex, category: str, ambiguities: list[str]) -> str:
    if not category:
        return ""
    for moid in chain:
        names = tags.get(moid, {}).get(category, ())
        if len(names) > 1:
            ambiguities.append(_ambiguity(moid, category, names))
            return ""
        if names:
            return names[0]
    return ""


def _ambiguity(moid: str, category: str, names: Sequence[str]) -> str:
    return f"{moid} carries {len(names)} tags of category {category!r} ({', '.join(sorted(names))})"


def plan_shared_labels(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    desired: Mapping[str, str],
    managed: Sequence[str],
) -> SharedLabelPlan:
    """Bring the shared keys in `managed` to `desired` (a key absent there: no value) without
    overwriting a value someone else set. A shared key no longer managed (its category was
    unset) is removed if the labeller had set it."""
    owned = _owned(annotations)
    plan = SharedLabelPlan()
    now_owned = set()
    for key in SHARED_KEYS:
        current, wanted = labels.get(key), desired.get(key) if key in managed else None
        if current == wanted:
            if wanted is not None:
                now_owned.add(key)
        elif current is None or key in owned:
            plan.labels[key] = wanted
            if wanted is not None:
                now_owned.add(key)
        elif wanted is not None:
            plan.conflicts.append(Conflict(key, current, wanted))
    if now_owned != owned:
        plan.owned_annotation = ",".join(sorted(now_owned))
    return plan


def _owned(annotations: Mapping[str, str]) -> set[str]:
    value = annotations.get(ANNOTATION_FAILURE_DOMAIN_LABELS, "")
    return {key for key in value.split(",") if key in SHARED_KEYS}

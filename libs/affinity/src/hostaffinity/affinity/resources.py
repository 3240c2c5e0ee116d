"""Requests against allocatable: kube-scheduler's NodeResourcesFit filter, for what-if planning.

The filtering engine leaves resources out (the extender decides only affinity); moving every pod
off a host needs them. Semantics at v1.36:
- a quantity as `resource.Quantity` reads it, kept in milli-units rounded up like MilliValue
  (k8s.io/apimachinery/pkg/api/resource/quantity.go);
- a pod's request as `PodRequests` builds it (k8s.io/component-helpers/resource/helpers.go): the
  containers' sum, sidecars (restartable init containers) added to it and to every later init
  container, the larger of that and the biggest init step, plus `overhead`; pod-level
  `spec.resources.requests` replace the aggregate for the resources they name;
- the fit as `fitsRequest` checks it (pkg/scheduler/framework/plugins/noderesources/fit.go): the
  pod count against `allocatable.pods`, then each resource the pod requests (zero skipped).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Final

import msgspec

Resources = dict[str, int]  # resource name -> milli-units
PODS: Final = "pods"
_SUFFIXES: Final = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}  # fmt: skip
_QUANTITY: Final = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[numkMGTPE]i?|)$")


class _Api(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """API JSON shapes: camelCase names, unknown fields ignored."""


class _Requirements(_Api, frozen=True):
    requests: dict[str, str] | None = None


class _Container(_Api, frozen=True):
    resources: _Requirements | None = None
    restart_policy: str | None = None


class _PodSpec(_Api, frozen=True):
    containers: list[_Container] = msgspec.field(default_factory=list)
    init_containers: list[_Container] = msgspec.field(default_factory=list)
    overhead: dict[str, str] | None = None
    resources: _Requirements | None = None


class _Pod(_Api, frozen=True):
    spec: _PodSpec = msgspec.field(default_factory=_PodSpec)


class _NodeStatus(_Api, frozen=True):
    allocatable: dict[str, str] = msgspec.field(default_factory=dict)


class _Node(_Api, frozen=True):
    status: _NodeStatus = msgspec.field(default_factory=_NodeStatus)


_POD_DECODER: Final = msgspec.json.Decoder(_Pod)
_NODE_DECODER: Final = msgspec.json.Decoder(_Node)


def parse_quantity(text: str) -> int:
    """A Kubernetes quantity in milli-units, rounded up ("100m" -> 100, "1Gi" -> 1073741824000)."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation as error:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from error
    scale = Decimal(10) ** int(suffix[1:]) if suffix[:1] in ("e", "E") else _SUFFIXES[suffix]
    return math.ceil(value * scale * 1000)


def _parse(values: Mapping[str, str] | None) -> Resources:
    return {name: parse_quantity(text) for name, text in (values or {}).items()}


def _add(total: Resources, more: Mapping[str, int]) -> Resources:
    result = dict(total)
    for name, value in more.items():
        result[name] = result.get(name, 0) + value
    return result


def _max(first: Mapping[str, int], second: Mapping[str, int]) -> Resources:
    return {name: max(first.get(name, 0), second.get(name, 0)) for name in {*first, *second}}


def _requests(container: _Container) -> Resources:
    return _parse(container.resources.requests if container.resources else None)


def pod_requests(raw: bytes | str) -> Resources:
    """What the scheduler reserves for the pod, from its API JSON."""
    spec = _POD_DECODER.decode(raw).spec
    total: Resources = {}
    for container in spec.containers:
        total = _add(total, _requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.init_containers:
        step = _requests(container)
        if container.restart_policy == "Always":
            total = _add(total, step)
            sidecars = _add(sidecars, step)
            step = sidecars
        else:
            step = _add(step, sidecars)
        init_peak = _max(init_peak, step)
    total = _max(total, init_peak)
    if spec.resources is not None:
        total.update(_parse(spec.resources.requests))
    return _add(total, _parse(spec.overhead))


def node_allocatable(raw: bytes | str) -> Resources:
    """`status.allocatable` of a Node, from its API JSON."""
    return _parse(_NODE_DECODER.decode(raw).status.allocatable)


def insufficient(
    request: Mapping[str, int], allocatable: Mapping[str, int], used: Mapping[str, int], pods: int
) -> list[str]:
    """The resources a node lacks for the pod ("Too many pods", "Insufficient cpu", ...);
    `used` is what its pods request, `pods` how many run there."""
    missing = []
    pod_limit = allocatable.get(PODS)
    if pod_limit is not None and (pods + 1) * 1000 > pod_limit:
        missing.append("Too many pods")
    for name in sorted(request):
        wanted = request[name]
        if name != PODS and wanted > 0 and wanted > allocatable.get(name, 0) - used.get(name, 0):
            missing.append(f"Insufficient {name}")
    return missing

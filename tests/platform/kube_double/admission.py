"""What the real server does to an object besides storing it, across kinds: decoding checks,
validation (Events, KubeVirt's schemas), version conversion (events.k8s.io to core Events), the
invariants of every write. Only what the recorded exchanges show. A kind's defaults on create
are its own, in registry/.
"""

from __future__ import annotations

import copy
import re
import secrets
import string
from datetime import UTC, datetime
from typing import Any

from . import crd_schemas, errors
from .resources import Resource

_MICRO_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
_MICROTIME_FIELDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "Lease": (("spec", "acquireTime"), ("spec", "renewTime")),
    "Event": (("eventTime",),),
}
_TIME_FIELDS = (("firstTimestamp",), ("lastTimestamp",), ("deprecatedFirstTimestamp",))

# events.k8s.io/v1 name -> core/v1 (storage) name.
_EVENT_RENAMES = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}


def now_time() -> str:
    """A metav1.Time: seconds precision, UTC."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """A metav1.MicroTime: exactly six fractional digits, UTC."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _get(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = obj
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _reformat(obj: dict[str, Any], path: tuple[str, ...], fmt: str) -> None:
    parent = _get(obj, path[:-1]) if len(path) > 1 else obj
    value = parent.get(path[-1]) if isinstance(parent, dict) else None
    if isinstance(value, str) and value:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
        parent[path[-1]] = parsed.strftime(fmt)


def check_decodable(resource: Resource, body: dict[str, Any]) -> None:
    """MicroTime fields need six fractional digits, or decoding fails with 400 (finding 6)."""
    for path in _MICROTIME_FIELDS.get(resource.kind, ()):
        value = _get(body, path)
        if isinstance(value, str) and not _MICRO_RE.match(value):
            raise errors.bad_request(
                f'{resource.kind} in version "v1" cannot be handled as a {resource.kind}: '
                f'parsing time "{value}" as "2006-01-02T15:04:05.000000Z07:00": '
                f'cannot parse "{value[19:]}" as ".000000"'
            )


def to_storage(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    """Convert a request object to the stored form (events.k8s.io Events are kept as core)."""
    obj = copy.deepcopy(obj)
    if resource.group == "events.k8s.io":
        obj = {_EVENT_RENAMES.get(k, k): v for k, v in obj.items()}
        obj["apiVersion"] = "v1"
    else:
        obj["apiVersion"] = resource.api_version
    obj["kind"] = resource.kind
    return obj


def present(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    """Render a stored object as `resource`'s version serialises it, zero values included.
    Only Events change, on a copy; anything else comes back as is, to be serialised, not
    changed."""
    if resource.kind != "Event":
        return obj
    obj = copy.deepcopy(obj)
    for path in _TIME_FIELDS:
        _reformat(obj, path, "%Y-%m-%dT%H:%M:%SZ")
    _reformat(obj, ("eventTime",), "%Y-%m-%dT%H:%M:%S.%fZ")
    if resource.group != "events.k8s.io":
        for key, zero in (
            ("source", {}),
            ("firstTimestamp", None),
            ("lastTimestamp", None),
            ("eventTime", None),
            ("reportingComponent", ""),
            ("reportingInstance", ""),
        ):
            obj.setdefault(key, zero)
        return obj
    back = {v: k for k, v in _EVENT_RENAMES.items()}
    out = {back.get(k, k): v for k, v in obj.items() if not (k == "count" and not v)}
    out["apiVersion"] = resource.api_version
    for key in ("reportingController", "reportingInstance"):
        if not out.get(key):
            out.pop(key, None)
    for key, zero in (
        ("eventTime", None),
        ("regarding", {}),
        ("deprecatedSource", {}),
        ("deprecatedFirstTimestamp", None),
        ("deprecatedLastTimestamp", None),
    ):
        out.setdefault(key, zero)
    return out


def validate_create(resource: Resource, obj: dict[str, Any], namespace: str | None) -> None:
    """The 422s the recordings show for Events and the KubeVirt schema."""
    name = obj["metadata"].get("name", "")
    if resource.group == "events.k8s.io" and not obj.get("eventTime"):
        raise errors.invalid(
            "Event",
            name,
            [{"reason": "FieldValueRequired", "message": "Required value", "field": "eventTime"}],
        )
    if resource.group == "" and resource.kind == "Event":
        involved_ns = (obj.get("involvedObject") or {}).get("namespace", "")
        allowed = ("", "default") if not involved_ns else (involved_ns,)
        if namespace not in allowed:
            raise errors.invalid(
                "Event",
                name,
                [
                    {
                        "reason": "FieldValueInvalid",
                        "message": f'Invalid value: "{involved_ns}": '
                        "does not match event.namespace",
                        "field": "involvedObject.namespace",
                    }
                ],
            )
    check_custom(resource, obj)


def check_custom(resource: Resource, obj: dict[str, Any]) -> None:
    """A KubeVirt object against KubeVirt's published schema of its kind: 422 when it breaks it."""
    if resource.kind not in crd_schemas.SCHEMA_FILES:
        return
    causes = crd_schemas.violations(resource.kind, obj)
    if causes:
        name = obj.get("metadata", {}).get("name", "")
        raise errors.invalid(resource.kind, name, causes, group=resource.group)


def prune_unknown(resource: Resource, obj: dict[str, Any]) -> list[str]:
    """Drop status fields the KubeVirt schemas do not know; return the Warning texts."""
    status = obj.get("status")
    if resource.kind not in crd_schemas.SCHEMA_FILES or not isinstance(status, dict):
        return []
    known = crd_schemas.status_fields(resource.kind)
    unknown = sorted(k for k in status if k not in known)
    for key in unknown:
        del status[key]
    return [f'unknown field "status.{key}"' for key in unknown]


def random_suffix() -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))


def normalize(resource: Resource, obj: dict[str, Any]) -> None:
    """Invariants kept on every write: the namespace name label, Go zero values, time formats."""
    if resource.kind == "Namespace":
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    if resource.kind == "Pod":
        status = obj.get("status") or {}
        for condition in status.get("conditions") or []:
            condition.setdefault("lastProbeTime", None)
        for container in status.get("containerStatuses") or []:
            container.setdefault("lastState", {})
    if resource.kind == "Lease":
        for path in _MICROTIME_FIELDS["Lease"]:
            _reformat(obj, path, "%Y-%m-%dT%H:%M:%S.%fZ")

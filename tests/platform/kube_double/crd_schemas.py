"""Published CRD schemas (KubeVirt's, and the multi-cluster About API's ClusterProperty), and what
the API server answers an object that breaks them.

The schemas are their projects' own (`tests/fixtures/kubevirt-crds/`,
`tests/fixtures/about-api-crds/`, provenance in tests/fixtures/README.md): the `openAPIV3Schema`
each CRD is installed with. The real
server validates a custom resource against it on every write (apiextensions-apiserver,
pkg/apiserver/validation) and answers 422 with one cause per violation, in the wording the
recording kube-apiserver/10-kubevirt-vmi-and-migration.json shows. Here the OpenAPI schema is
read as JSON Schema: `nullable` lets null through, `x-kubernetes-int-or-string` takes an integer
or a string; the CEL rules (`x-kubernetes-validations`) are not evaluated, but their presence
gives the sentinel cause the real server adds when the schema errors kept it from running them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from tests.recorded_fixtures import fixture_dir

if TYPE_CHECKING:
    import jsonschema

# The fixture set and schema file of each custom kind the double serves.
SCHEMA_FILES: Final = {
    "VirtualMachine": ("kubevirt-crds", "virtualmachine.json"),
    "VirtualMachineInstance": ("kubevirt-crds", "virtualmachineinstance.json"),
    "VirtualMachineInstanceReplicaSet": ("kubevirt-crds", "virtualmachineinstancereplicaset.json"),
    "VirtualMachinePool": ("kubevirt-crds", "virtualmachinepool.json"),
    "VirtualMachineInstanceMigration": ("kubevirt-crds", "virtualmachineinstancemigration.json"),
    "KubeVirt": ("kubevirt-crds", "kubevirt.json"),
    "ClusterProperty": ("about-api-crds", "clusterproperty.json"),
}
RULES_SKIPPED: Final = {
    "reason": "FieldValueInvalid",
    "message": "Invalid value: null: some validation rules were not checked because the object "
    "was invalid; correct the existing errors to complete validation",
    "field": "<nil>",
}
_JSON_TYPES: Final = (
    (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
    (list, "array"), (dict, "object"),
)  # fmt: skip


def _as_json_schema(node: Any) -> Any:
    """An OpenAPI v3 schema node as JSON Schema (the two Kubernetes extensions that change
    which values are valid, translated)."""
    if isinstance(node, list):
        return [_as_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _as_json_schema(value) for key, value in node.items()}
    if "properties" in node:
        out["properties"] = {k: _as_json_schema(v) for k, v in node["properties"].items()}
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@functools.cache
def published_schema(kind: str) -> dict[str, Any]:
    """The published openAPIV3Schema for `kind`, as stored."""
    fixtures, name = SCHEMA_FILES[kind]
    schema: dict[str, Any] = json.loads((fixture_dir(fixtures) / name).read_text())
    return schema


@functools.cache
def _validator(kind: str) -> jsonschema.Draft7Validator:
    # Imported here: the double also runs in a service image (compose's API server), which has
    # no jsonschema and never stores a KubeVirt object.
    import jsonschema

    return jsonschema.Draft7Validator(_as_json_schema(published_schema(kind)))


def status_fields(kind: str) -> frozenset[str]:
    """The fields the schema gives `status` (others are pruned, with a warning)."""
    status = published_schema(kind)["properties"].get("status", {})
    return frozenset(status.get("properties", {}))


def _field(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return next(name for kind, name in _JSON_TYPES if isinstance(value, kind))


def _required(field: str) -> dict[str, str]:
    return {"reason": "FieldValueRequired", "message": "Required value", "field": field}


def _causes(error: jsonschema.ValidationError) -> list[dict[str, str]]:
    field = _field(error.absolute_path)
    if error.validator == "type":
        actual = _type_name(error.instance)
        expected = error.validator_value
        expected = expected[0] if isinstance(expected, list) else expected
        must = f"{field} in body must be of type {expected}"
        message = f'Invalid value: "{actual}": {must}: "{actual}"'
        return [{"reason": "FieldValueTypeInvalid", "message": message, "field": field}]
    if error.validator == "required" and isinstance(error.instance, Mapping):
        base = list(error.absolute_path)
        missing = [name for name in error.validator_value if name not in error.instance]
        return [_required(_field([*base, name])) for name in missing]
    if error.validator == "enum":
        supported = ", ".join(json.dumps(v) for v in error.validator_value)
        message = f"Unsupported value: {json.dumps(error.instance)}: supported values: {supported}"
        return [{"reason": "FieldValueNotSupported", "message": message, "field": field}]
    message = f"Invalid value: {json.dumps(error.instance)}: {field} in body {error.message}"
    return [{"reason": "FieldValueInvalid", "message": message, "field": field}]


_ORDER: Final = {"FieldValueTypeInvalid": 0, "FieldValueRequired": 2}


def violations(kind: str, obj: Mapping[str, Any]) -> list[dict[str, str]]:
    """The 422's causes for `obj` against KubeVirt's schema of `kind` (none when it is valid):
    type errors first and required fields last, as the recording orders them."""
    causes = [cause for error in _validator(kind).iter_errors(obj) for cause in _causes(error)]
    causes.sort(key=lambda cause: _ORDER.get(cause["reason"], 1))
    if causes and "x-kubernetes-validations" in json.dumps(published_schema(kind)):
        causes.append(dict(RULES_SKIPPED))
    return causes

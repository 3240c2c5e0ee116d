"""The admission policy's CEL, run by a CEL runtime the way kube-apiserver runs it.

No kube-apiserver runs here, so the policy in k8s/components/admission-policy is evaluated by
cel-expr-python (Google's CEL C++ runtime) the way kube-apiserver v1.36 runs it
(staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating/dispatcher.go): the
matchConditions once on the object as sent, then each mutation in order on the object as the
previous mutations left it, a mutation whose evaluation fails skipped (`failurePolicy: Ignore`),
each JSONPatch applied with the `jsonpatch` library. test_admission_policy_cel.py compares the
pod it stores with the webhook's.

`object` is declared `dyn`, where kube-apiserver declares it as the Pod type and so rejects a
selection of a field the Pod has not (`object.spec.?afinity` would otherwise just be absent):
`check_object_selections` makes that check against the Pod schema.

Three source rewrites adapt Kubernetes' CEL environment to the library; none changes a value:

1. Typed construction `Object.<path>{field: x, ?field: y}` and `JSONPatch{...}` become map
   literals `{'field': x, ?'field': y}`. kube-apiserver turns the typed value into JSON holding
   exactly the fields that were set, which is what the map holds. kube-apiserver's compile-time
   check that the path and each field exist in the Pod schema is made by the rewrite itself,
   against the Pod OpenAPI schema kubernetes-validate ships; the stored pod is validated
   against that schema too (strict: unknown fields fail).
2. `variables.NAME` becomes `cel.bind(variables_NAME, <its expression>, ...)`, nested in the
   declaration order around every expression. kube-apiserver gives each evaluation a fresh lazy
   map of variables, evaluated on first use against the same object
   (staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/composition.go, `Variables`), and a
   variable may use only earlier ones; cel-cpp initialises `cel.bind` lazily too, so a variable
   that would fail (e.g. `int()` of a bad spread annotation) fails only where it is used. The
   tests assert that no expression fails on any pod here.
3. `M.transformMap(k, v, P, T)` becomes `test.mapOfEntries(M.transformList(k, v, P, [k, T]))`:
   cel-expr-python 0.1.3 declares the two-variable comprehensions but its runtime has no
   `cel.@mapInsert`, the map accumulator transformMap expands to. transformList visits the same
   entries with the same predicate; the pairs, whose keys are unique because they come from a
   map, are folded into the map by `_map_of_entries`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import yaml
from cel_expr_python import cel

POLICY_FILE = (
    Path(__file__).resolve().parents[1]
    / "k8s/components/admission-policy/mutatingadmissionpolicy.yaml"
)
KUBERNETES_VERSION = "1.34.0"  # newest Pod schema kubernetes-validate ships
SCHEMAS = (
    Path(kubernetes_validate.__file__).parent
    / f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
)
# kube-apiserver's JSONPatch type (staging/src/k8s.io/apiserver/pkg/cel/mutation/jsonpatch.go).
JSONPATCH_FIELDS = {"op", "path", "from", "value"}

# The CEL libraries the policy uses, as kube-apiserver v1.36 has them (optional types, strings,
# lists.range, two-variable comprehensions) plus `cel.bind` for rewrite 2.
ENVIRONMENT = """
extensions:
  - name: "optional"
    version: 2
  - name: "strings"
  - name: "lists"
  - name: "two-var-comprehensions"
  - name: "bindings"
variables:
  - name: "object"
    type: "dyn"
"""

TYPED_LITERAL = re.compile(r"(?<![\w.])(?:Object(?:\s*\.\s*\w+)+|JSONPatch)\s*\{")
FIELD_ENTRY = re.compile(r"\s*(\?)?\s*([A-Za-z_]\w*)\s*:(.*)", re.DOTALL)
VARIABLE = re.compile(r"(?<![\w.])variables\.([A-Za-z_]\w*)")
OBJECT_SELECTION = re.compile(r"(?<![\w.])object((?:\s*\.\s*\??\s*\w+)+)(\s*\()?")
TRANSFORM_MAP = re.compile(r"\.transformMap\s*\(")
CLOSING = {"(": ")", "[": "]", "{": "}"}


def _map_of_entries(entries: list[list[Any]]) -> dict[Any, Any]:
    return {key: value for key, value in entries}


def _environment() -> Any:
    entries = cel.Type.List(cel.Type.List(cel.Type.DYN))
    overload = cel.Overload(
        "test_map_of_entries",
        return_type=cel.Type.Map(cel.Type.DYN, cel.Type.DYN),
        parameters=[entries],
        impl=_map_of_entries,
    )
    support = cel.CelExtension("test", [cel.FunctionDecl("test.mapOfEntries", [overload])])
    return cel.NewEnv(config=cel.NewEnvConfigFromYaml(ENVIRONMENT), extensions=[support])


ENV = _environment()


def _in_code(source: str) -> list[bool]:
    """For each character of `source`, whether it is code rather than part of a string literal
    (the policy's literals are '...' without escapes)."""
    mask, quote = [], ""
    for char in source:
        if quote:
            mask.append(False)
            quote = "" if char == quote else quote
        elif char in "'\"":
            mask.append(False)
            quote = char
        else:
            mask.append(True)
    return mask


def _depths(source: str) -> list[int]:
    """For each character, the bracket depth after it (brackets in string literals ignored)."""
    depths, depth = [], 0
    for char, code in zip(source, _in_code(source), strict=True):
        if code and char in CLOSING:
            depth += 1
        elif code and char in CLOSING.values():
            depth -= 1
        depths.append(depth)
    return depths


def _closing(source: str, opening: int) -> int:
    """The index of the bracket that closes the one at `opening`."""
    depths = _depths(source)
    outside = depths[opening] - 1
    return next(at for at in range(opening + 1, len(source)) if depths[at] == outside)


def _top_level_parts(source: str) -> list[str]:
    """`source` split at the commas outside any bracket or string literal."""
    scanned = zip(source, _in_code(source), _depths(source), strict=True)
    cuts = [
        at for at, (char, code, depth) in enumerate(scanned) if char == "," and code and depth == 0
    ]
    bounds = zip([-1, *cuts], [*cuts, len(source)], strict=True)
    return [source[start + 1 : end] for start, end in bounds]


def _first_in_code(pattern: re.Pattern[str], source: str) -> re.Match[str] | None:
    code = _in_code(source)
    return next((m for m in pattern.finditer(source) if code[m.start()]), None)


@functools.cache
def _schema(name: str) -> Any:
    return json.loads((SCHEMAS / name).read_text())


def _fields_of(type_name: str) -> set[str]:
    """The fields of `Object.a.b` (the Pod schema at .a.b, a list field naming its items) or of
    `JSONPatch`: the compile-time check kube-apiserver makes and rewrite 1 would drop."""
    if type_name == "JSONPatch":
        return JSONPATCH_FIELDS
    definitions = _schema("_definitions.json")["$defs"]

    def resolved(schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = definitions[schema["$ref"].rpartition("/")[2]]
        return resolved(schema["items"]) if "items" in schema else schema

    schema = resolved(_schema("pod-v1.json"))
    for segment in type_name.split(".")[1:]:
        properties = schema.get("properties", {})
        if segment not in properties:
            raise ValueError(f"no field {segment!r} on the way to {type_name}")
        schema = resolved(properties[segment])
    return set(schema["properties"])


def check_object_selections(source: str) -> None:
    """Each field selected on `object` (`.x` or `.?x`, up to a method call) is in the Pod schema."""
    code = _in_code(source)
    for found in OBJECT_SELECTION.finditer(source):
        if not code[found.start()]:
            continue
        segments = re.findall(r"\w+", found.group(1))
        if found.group(2):  # the last name is a method called on the selection
            segments.pop()
        for depth, segment in enumerate(segments):
            parent = ".".join(["Object", *segments[:depth]])
            if segment not in _fields_of(parent):
                raise ValueError(f"no field {segment!r} in {parent}: {found.group()!r}")


def typed_literals_as_maps(source: str) -> str:
    """Rewrite 1: `Object.a.b{f: x, ?g: y}` and `JSONPatch{...}` as `{'f': x, ?'g': y}`."""
    found = _first_in_code(TYPED_LITERAL, source)
    if found is None:
        return source
    opening = found.end() - 1
    closing = _closing(source, opening)
    known = _fields_of("".join(source[found.start() : opening].split()))
    entries = []
    for part in _top_level_parts(source[opening + 1 : closing]):
        entry = FIELD_ENTRY.fullmatch(part)
        if entry is None:
            if part.strip():
                raise ValueError(f"not a field initialiser: {part!r}")
            continue
        optional, name, value = entry.groups()
        if name not in known:
            raise ValueError(f"no field {name!r} in {source[found.start() : opening]}")
        entries.append(f"{optional or ''}'{name}': {typed_literals_as_maps(value.strip())}")
    rewritten = "{" + ", ".join(entries) + "}"
    return source[: found.start()] + rewritten + typed_literals_as_maps(source[closing + 1 :])


def transform_map_via_entries(source: str) -> str:
    """Rewrite 3: `M.transformMap(k, v, P, T)` as `test.mapOfEntries(M.transformList(k, v, P,
    [k, T]))`; M is the operand the call is made on (an identifier path, as in the policy)."""
    found = _first_in_code(TRANSFORM_MAP, source)
    if found is None:
        return source
    operand = re.search(r"[\w.]+\s*$", source[: found.start()])
    if operand is None:
        raise ValueError(f"transformMap on an operand this rewrite does not handle: {source!r}")
    closing = _closing(source, found.end() - 1)
    arguments = _top_level_parts(source[found.end() : closing])
    if len(arguments) != 4:
        raise ValueError(f"transformMap with {len(arguments)} arguments: {source!r}")
    key, value, predicate, transform = (a.strip() for a in arguments)
    pairs = f"[{key}, {transform_map_via_entries(transform)}]"
    listed = f"{operand.group().strip()}.transformList({key}, {value}, {predicate}, {pairs})"
    return (
        source[: operand.start()]
        + f"test.mapOfEntries({listed})"
        + transform_map_via_entries(source[closing + 1 :])
    )


def variable_names(source: str) -> str:
    code = _in_code(source)
    return VARIABLE.sub(
        lambda m: f"variables_{m.group(1)}" if code[m.start()] else m.group(), source
    )


def _adapted(source: str) -> str:
    check_object_selections(source)
    return variable_names(transform_map_via_entries(typed_literals_as_maps(source)))


@dataclass
class Policy:
    """The policy's expressions, adapted to cel-expr-python and compiled (type-checked)."""

    match_conditions: list[Any]
    mutations: list[Any]
    errors: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, edit: Callable[[dict[str, Any]], None] = lambda spec: None) -> Policy:
        spec = yaml.safe_load(POLICY_FILE.read_text())["spec"]
        edit(spec)
        variables = [(v["name"], _adapted(v["expression"])) for v in spec.get("variables", [])]

        def compiled(expression: str) -> Any:
            # Only the variables the expression reaches are bound (each one nests the source
            # once more, and cel-cpp's parser stops at a depth of 32); unused ones are never
            # evaluated by kube-apiserver either, so leaving them out changes no value.
            source = _adapted(expression)
            for name, value in reversed(variables):
                if f"variables_{name}" in source:
                    source = f"cel.bind(variables_{name}, {value}, {source})"
            return ENV.compile(source)

        assert all(m["patchType"] == "JSONPatch" for m in spec["mutations"])
        return cls(
            match_conditions=[compiled(c["expression"]) for c in spec.get("matchConditions", [])],
            mutations=[compiled(m["jsonPatch"]["expression"]) for m in spec["mutations"]],
        )

    def _evaluate(self, program: Any, pod: dict[str, Any], what: str) -> Any:
        """The expression's value on `pod`, or None with the error noted (cel-expr-python
        returns most evaluation errors as values of type error, and raises the rest)."""
        try:
            value = program.eval(data={"object": pod})
        except RuntimeError as failed:
            self.errors.append(f"{what}: {failed}")
            return None
        if value.type() == cel.Type.ERROR:
            self.errors.append(f"{what}: {value.plain_value()}")
            return None
        return value.plain_value()

    def admit(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The pod kube-apiserver stores after this policy (dispatcher.go's order; what fails is
        skipped, as `failurePolicy: Ignore` has it)."""
        matches = [
            self._evaluate(c, pod, f"matchCondition {n}")
            for n, c in enumerate(self.match_conditions)
        ]
        if False in matches or None in matches:
            return pod
        for position, mutation in enumerate(self.mutations):
            operations = self._evaluate(mutation, pod, f"mutation {position}")
            if operations is not None:
                pod = jsonpatch.apply_patch(pod, operations)
        return pod

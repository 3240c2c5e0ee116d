"""The write verbs: create, update, the four patch types (server-side apply's ownership
included), delete, and the commit every write ends in (subresource rules, generation,
managedFields, no-op detection) (a part of KubeApiServer)."""

from __future__ import annotations

import copy
import uuid
from typing import TYPE_CHECKING, Any

import yaml
from aiohttp import web

from . import admission, errors, fieldsets, patches, registry
from .label_keys import prepare_pod_affinity
from .reads import stored_object
from .registry import pods, scale
from .request import TRUE, Request, json_response, object_key, read_body
from .resources import Resource, Route, lookup
from .store import Key, Store

if TYPE_CHECKING:
    from .faults import PatchHold

_BUILTIN_PATCH_TYPES = (
    "application/json-patch+json, application/merge-patch+json, "
    "application/apply-patch+yaml, application/strategic-merge-patch+json"
)
_CUSTOM_PATCH_TYPES = (
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


def _strip_volatile(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    out["metadata"].pop("resourceVersion", None)
    return out


def _spec_changed(resource: Resource, old: dict[str, Any], new: dict[str, Any]) -> bool:
    if resource.custom and not resource.status_subresource:
        return {k: v for k, v in old.items() if k != "metadata"} != {
            k: v for k, v in new.items() if k != "metadata"
        }
    return old.get("spec") != new.get("spec")


class Writes:
    """Create, update, patch and delete (a part of KubeApiServer)."""

    store: Store
    holds: dict[tuple[str, Key], PatchHold]
    merges_label_keys: bool

    def _create(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        route = request.route
        resource = route.resource
        admission.check_decodable(resource, body)
        obj = admission.to_storage(resource, body)
        meta = obj.setdefault("metadata", {})
        if route.namespace is not None:
            if meta.get("namespace", route.namespace) != route.namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match "
                    "the namespace sent on the request"
                )
            meta["namespace"] = route.namespace
            if self.store.get("namespaces", ("", route.namespace)) is None:
                raise errors.not_found(
                    lookup("", "v1", "namespaces"),  # type: ignore[arg-type]
                    route.namespace,
                )
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + admission.random_suffix()
        name = meta.get("name", "")
        if self.store.get(resource.storage_key, object_key(route, name)) is not None:
            raise errors.already_exists(resource, name)
        if resource.kind == "Pod":
            prepare_pod_affinity(obj, merges=self.merges_label_keys)
        admission.validate_create(resource, obj, route.namespace)
        node_name = (obj.get("spec") or {}).get("nodeName") if resource.kind == "Pod" else None
        node = self.store.get("nodes", ("", node_name)) if node_name else None
        registry.default_create(resource, obj, node)
        stored = self.commit_new(resource, obj, request.manager)
        return admission.present(resource, stored)

    def commit_new(
        self, resource: Resource, obj: dict[str, Any], manager: str | None
    ) -> dict[str, Any]:
        """Store a new object with server-set metadata (also how seeds enter)."""
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", admission.now_time())
        meta.pop("resourceVersion", None)
        if manager is not None and resource.managed_fields:
            meta["managedFields"] = fieldsets.record_update(
                [],
                manager=manager,
                api_version=resource.api_version,
                subresource=None,
                old={},
                new=obj,
                now=admission.now_time(),
            )
        return self.store.write(resource.storage_key, obj)

    def commit(
        self,
        request: Request,
        old: dict[str, Any],
        new: dict[str, Any],
        *,
        subresource: str | None,
        track: bool = True,
    ) -> dict[str, Any]:
        """The shared tail of PUT and PATCH: subresource rules, admission, ownership, no-op."""
        resource = request.route.resource
        if resource.status_subresource:
            if subresource == "status":
                status = new.get("status")
                new = copy.deepcopy(old)
                new["status"] = status
            elif "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        for key in (
            "uid",
            "creationTimestamp",
            "name",
            "namespace",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if key in old["metadata"]:
                new["metadata"][key] = old["metadata"][key]
        new["kind"], new["apiVersion"] = old["kind"], old["apiVersion"]
        admission.normalize(resource, new)
        admission.check_custom(resource, new)
        if resource.has_generation and _spec_changed(resource, old, new):
            new["metadata"]["generation"] = old["metadata"].get("generation", 0) + 1
        if _strip_volatile(old) == _strip_volatile(new):
            return old
        if track and resource.managed_fields:
            new["metadata"]["managedFields"] = fieldsets.record_update(
                old["metadata"].get("managedFields", []),
                manager=request.manager,
                api_version=resource.api_version,
                subresource=subresource,
                old=old,
                new=new,
                now=admission.now_time(),
            )
        return self.store.write(resource.storage_key, new)

    def _update(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        route = request.route
        admission.check_decodable(route.resource, body)
        old = stored_object(self.store, route)
        new = admission.to_storage(route.resource, body)
        meta = new.setdefault("metadata", {})
        if meta.get("name", route.name) != route.name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not "
                f"match the name on the URL ({route.name})"
            )
        self._check_preconditions(route, old, meta)
        meta["managedFields"] = old["metadata"].get("managedFields", [])
        return admission.present(
            route.resource, self.commit(request, old, new, subresource=route.subresource)
        )

    def _check_preconditions(self, route: Route, old: dict[str, Any], meta: dict[str, Any]) -> None:
        if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
            raise errors.status(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: "
                f"{old['metadata']['uid']}",
                {"name": route.name, "kind": route.resource.plural},
            )
        if (
            meta.get("resourceVersion")
            and meta["resourceVersion"] != old["metadata"]["resourceVersion"]
        ):
            raise errors.conflict(route.resource, route.name or "")

    async def _patch(self, request: Request) -> web.Response:
        route = request.route
        hold = self.holds.get((route.resource.storage_key, object_key(route, route.name or "")))
        if hold is not None:
            hold.count += 1
            hold.arrived.set()
            await hold.released.wait()
        content_type = request.http.content_type
        body = await read_body(request.http)
        if (
            content_type == "application/apply-patch+yaml"
            and self.store.get(route.resource.storage_key, object_key(route, route.name or ""))
            is None
        ):
            return json_response(self._apply_new(request, body), 201)
        old = stored_object(self.store, route)
        warnings: list[str] = []
        if content_type == "application/apply-patch+yaml":
            new = self._apply(request, old, body)
            track = False
        else:
            new = self._patched(route.resource, content_type, old, body)
            track = True
            self._check_preconditions(route, old, new.get("metadata", {}))
            new.setdefault("metadata", {})["managedFields"] = old["metadata"].get(
                "managedFields", []
            )
        if route.resource.custom:
            warnings = admission.prune_unknown(route.resource, new)
        stored = self.commit(request, old, new, subresource=route.subresource, track=track)
        headers = (
            {
                "Warning": ", ".join(
                    f'299 - "{w.replace(chr(34), chr(92) + chr(34))}"' for w in warnings
                )
            }
            if warnings
            else None
        )
        return json_response(admission.present(route.resource, stored), headers=headers)

    @staticmethod
    def _patched(
        resource: Resource, content_type: str, old: dict[str, Any], body: Any
    ) -> dict[str, Any]:
        if content_type == "application/strategic-merge-patch+json":
            if resource.custom:
                raise errors.unsupported_media_type(_CUSTOM_PATCH_TYPES)
            result: Any = patches.strategic_merge_patch(old, body)
        elif content_type == "application/merge-patch+json":
            result = patches.merge_patch(old, body)
        elif content_type == "application/json-patch+json":
            if not isinstance(body, list):
                raise errors.bad_request(
                    "error decoding patch: json: cannot unmarshal object "
                    "into Go value of type []handlers.jsonPatchOp"
                )
            try:
                result = patches.json_patch(old, body)
            except (patches.PatchFailed, KeyError, ValueError):
                raise errors.status(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request",
                    {},
                ) from None
        else:
            raise errors.unsupported_media_type(
                _CUSTOM_PATCH_TYPES if resource.custom else _BUILTIN_PATCH_TYPES
            )
        if not isinstance(result, dict) or not isinstance(result.get("metadata"), dict):
            raise errors.bad_request("the patch did not produce an object")
        return result

    def _apply(self, request: Request, old: dict[str, Any], body: Any) -> dict[str, Any]:
        manager = request.query.get("fieldManager")
        if not manager:
            raise errors.status(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is '
                "required for apply patch",
                {
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: is required for apply patch",
                            "field": "fieldManager",
                        }
                    ],
                },
            )
        config = yaml.safe_load(body) if isinstance(body, str) else body
        try:
            new, entries = fieldsets.apply(
                old["metadata"].get("managedFields", []),
                manager=manager,
                api_version=request.route.resource.api_version,
                current=old,
                config=config,
                force=request.query.get("force", "") in TRUE,
                now=admission.now_time(),
            )
        except fieldsets.ApplyConflict as exc:
            raise _apply_conflict(exc.conflicts) from None
        new["metadata"]["managedFields"] = entries
        return new

    async def _scale(self, request: Request) -> web.Response:
        """GET, PATCH or PUT of a Deployment's or StatefulSet's scale subresource."""
        old = stored_object(self.store, request.route)
        if request.http.method == "GET":
            return json_response(scale.scale_of(old))
        body = await read_body(request.http)
        new = scale.scaled(old, request.http.content_type, body)
        stored_now = self.commit(request, old, new, subresource="scale")
        return json_response(scale.scale_of(stored_now))

    def _apply_new(self, request: Request, body: Any) -> dict[str, Any]:
        """Server-side apply of an object that does not exist yet creates it, as `kubectl
        apply --server-side` relies on (apiserver endpoints/handlers/patch.go: an apply patch
        on NotFound becomes a create), in the namespace it names, which must exist."""
        route = request.route
        resource = route.resource
        empty = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {
                "name": route.name,
                **({"namespace": route.namespace} if route.namespace else {}),
            },
        }
        if (
            route.namespace is not None
            and self.store.get("namespaces", ("", route.namespace)) is None
        ):
            raise errors.not_found(lookup("", "v1", "namespaces"), route.namespace)  # type: ignore[arg-type]
        obj = admission.to_storage(resource, self._apply(request, empty, body))
        admission.validate_create(resource, obj, route.namespace)
        registry.default_create(resource, obj, None)
        # The managedFields are the apply's own entry: commit_new records no update on top.
        return admission.present(resource, self.commit_new(resource, obj, None))

    def _delete(self, request: Request) -> dict[str, Any]:
        route = request.route
        old = stored_object(self.store, route)
        spec = old.get("spec") or {}
        if route.resource.kind == "Pod" and spec.get("nodeName"):
            return admission.present(
                route.resource, pods.terminate(self.store, route.resource, old)
            )
        gone = self.store.delete(route.resource.storage_key, object_key(route, route.name or ""))
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": route.name,
                **({"group": route.resource.group} if route.resource.group else {}),
                "kind": route.resource.plural,
                "uid": gone["metadata"]["uid"],
            },
        }


def _apply_conflict(conflicts: list[fieldsets.Conflict]) -> errors.ApiError:
    by_manager: dict[tuple[str, str], list[str]] = {}
    for c in conflicts:
        by_manager.setdefault((c.manager, c.api_version), []).append(c.field)
    count = len(conflicts)
    if count == 1:
        c = conflicts[0]
        message = (
            f'Apply failed with 1 conflict: conflict with "{c.manager}" using '
            f"{c.api_version}: {c.field}"
        )
    else:
        lines = [
            f'conflicts with "{m}" using {v}:\n' + "\n".join(f"- {f}" for f in fs)
            for (m, v), fs in by_manager.items()
        ]
        message = f"Apply failed with {count} conflicts: " + "\n".join(lines)
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{c.manager}" using {c.api_version}',
            "field": c.field,
        }
        for c in conflicts
    ]
    return errors.status(409, "Conflict", message, {"causes": causes})

"""The subresources that are actions, not state: pods/binding, pods/eviction (PDB checks),
serviceaccounts/token, and the self-subject reviews.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import admission, errors, fieldsets
from .auth import User, allowed
from .resources import lookup

if TYPE_CHECKING:
    from .server import KubeApiServer, Request

_PDB = lookup("policy", "v1", "poddisruptionbudgets")
_EVICT_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def _selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and key in labels and labels[key] in values)
            or (op == "Exists" and key not in labels)
            or (op == "DoesNotExist" and key in labels)
        ):
            return False
    return True


def _too_many(cause: str, retry_after: int | None = None) -> errors.ApiError:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    headers = {"Retry-After": str(retry_after)} if retry_after else None
    return errors.status(429, "TooManyRequests", _EVICT_MESSAGE, details, headers=headers)


class SubresourceActions:
    def __init__(self, server: KubeApiServer) -> None:
        self.server = server

    async def create(self, request: Request, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        sub = request.route.subresource
        if sub == "binding":
            return 201, self._bind(request, body)
        if sub == "eviction":
            return 201, self._evict(request, body)
        return 201, self._token(request, body)

    def _pod(self, request: Request) -> dict[str, Any]:
        route = request.route
        pod = self.server.store.get("pods", (route.namespace or "", route.name or ""))
        if pod is None:
            raise errors.not_found(route.resource, route.name or "")
        return pod

    def _bind(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        """Bind without checking the node exists; copy its topology labels if it does."""
        route = request.route
        if (body.get("metadata") or {}).get("name") != route.name:
            raise errors.bad_request("name in URL does not match name in Binding object")
        pod = self._pod(request)
        node_name = (body.get("target") or {}).get("name", "")
        current = (pod.get("spec") or {}).get("nodeName")
        if current:
            raise errors.status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{route.name}": pod {route.name} '
                f'is already assigned to node "{current}"',
                {"name": route.name, "kind": "pods/binding"},
            )
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = node_name
        conditions = new.setdefault("status", {}).setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": admission.now_time(),
            }
        )
        node = self.server.store.get("nodes", ("", node_name))
        if node is not None:
            admission.copy_topology_labels(new, node)
        self.server.store.write("pods", new)
        return errors.success(201)

    def _evict(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        """The Eviction API: PDB checks as policy/v1 does them, then graceful deletion."""
        route = request.route
        pod = self._pod(request)
        dry_run = "All" in ((body.get("deleteOptions") or {}).get("dryRun") or [])
        if pod["metadata"].get("deletionTimestamp"):
            return errors.success(201)
        labels = pod["metadata"].get("labels") or {}
        pdbs = [
            p
            for p in self.server.store.objects("poddisruptionbudgets.policy", route.namespace)
            if _selector_matches((p.get("spec") or {}).get("selector"), labels)
        ]
        if len(pdbs) > 1:
            raise errors.status(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                "does not support.",
            )
        if pdbs:
            self._charge_budget(request, pdbs[0], pod, dry_run)
        if not dry_run:
            self._terminate(request, pod)
        return errors.success(201)

    def _charge_budget(
        self, request: Request, pdb: dict[str, Any], pod: dict[str, Any], dry_run: bool
    ) -> None:
        name = pdb["metadata"]["name"]
        status = pdb.get("status") or {}
        if status.get("observedGeneration", 0) < pdb["metadata"].get("generation", 0):
            raise _too_many(
                f"The disruption budget {name} is still being processed by the server.", 10
            )
        allowed_now = status.get("disruptionsAllowed", 0)
        if allowed_now <= 0:
            current, desired = status.get("currentHealthy", 0), status.get("desiredHealthy", 0)
            if current > desired:
                raise _too_many(
                    f"The disruption budget {name} does not allow evicting pods currently"
                )
            raise _too_many(
                f"The disruption budget {name} needs {desired} healthy pods and has "
                f"{current} currently"
            )
        if dry_run:
            return
        new = copy.deepcopy(pdb)
        new_status = new["status"]
        new_status["disruptionsAllowed"] = allowed_now - 1
        new_status.setdefault("disruptedPods", {})[pod["metadata"]["name"]] = admission.now_time()
        if new_status["disruptionsAllowed"] == 0:
            new_status["conditions"] = [
                {
                    "type": "DisruptionAllowed",
                    "status": "False",
                    "observedGeneration": pdb["metadata"].get("generation", 0),
                    "lastTransitionTime": admission.now_time(),
                    "reason": "InsufficientPods",
                    "message": "",
                }
            ]
        assert _PDB is not None
        new["metadata"]["managedFields"] = fieldsets.record_update(
            pdb["metadata"].get("managedFields", []),
            manager="kube-apiserver",
            api_version=_PDB.api_version,
            subresource="status",
            old=pdb,
            new=new,
            now=admission.now_time(),
        )
        self.server.store.write(_PDB.storage_key, new)

    def _terminate(self, request: Request, pod: dict[str, Any]) -> None:
        """DisruptionTarget condition first (a status write), then graceful deletion."""
        marked = copy.deepcopy(pod)
        conditions = marked.setdefault("status", {}).setdefault("conditions", [])
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": admission.now_time(),
                "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting",
            }
        )
        marked = self.server.store.write("pods", marked)
        self.server.terminate_pod(request, marked)

    def _token(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        """TokenRequest: mint a token for the ServiceAccount, which RBAC then grants nothing."""
        route = request.route
        account = self.server.store.get(
            "serviceaccounts", (route.namespace or "", route.name or "")
        )
        if account is None:
            raise errors.not_found(route.resource, route.name or "")
        token = register_service_account(self.server.tokens, account)
        spec = copy.deepcopy(body.get("spec") or {})
        spec["audiences"] = spec.get("audiences") or [
            "https://kubernetes.default.svc.cluster.local"
        ]
        spec.setdefault("expirationSeconds", 3600)
        spec.setdefault("boundObjectRef", None)
        expires = datetime.now(UTC) + timedelta(seconds=int(spec["expirationSeconds"]))
        api_version = "authentication.k8s.io/v1"
        meta = account["metadata"]
        return {
            "kind": "TokenRequest",
            "apiVersion": api_version,
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
                "creationTimestamp": meta["creationTimestamp"],
                "managedFields": fieldsets.record_update(
                    [],
                    manager=request.manager,
                    api_version=api_version,
                    subresource="token",
                    old={},
                    new={"spec": body.get("spec") or {}},
                    now=admission.now_time(),
                ),
            },
            "spec": spec,
            "status": {
                "token": token,
                "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }

    async def review(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        """SelfSubjectReview and SelfSubjectAccessReview for the calling user."""
        user = request.user
        route = request.route
        if route.resource.plural == "selfsubjectreviews":
            info: dict[str, Any] = {"username": user.name}
            if user.uid:
                info["uid"] = user.uid
            info["groups"] = list(user.groups)
            if user.extra:
                info["extra"] = user.extra
            return {
                "kind": "SelfSubjectReview",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": admission.now_time()},
                "status": {"userInfo": info},
            }
        attributes = (body.get("spec") or {}).get("resourceAttributes") or {}
        api_version = "authorization.k8s.io/v1"
        return {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": api_version,
            "metadata": {
                "managedFields": fieldsets.record_update(
                    [],
                    manager=request.manager,
                    api_version=api_version,
                    subresource=None,
                    old={},
                    new={"spec": body.get("spec") or {}},
                    now=admission.now_time(),
                )
            },
            "spec": body.get("spec") or {},
            "status": {
                "allowed": allowed(user, attributes.get("verb", ""), attributes.get("resource", ""))
            },
        }


def register_service_account(tokens: dict[str, User], account: dict[str, Any]) -> str:
    """Issue a bearer token that authenticates as the ServiceAccount."""
    meta = account["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    token = f"sa-{uuid.uuid4().hex}"
    tokens[token] = User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        uid=meta["uid"],
        extra={"authentication.kubernetes.io/credential-id": [f"JTI={uuid.uuid4()}"]},
    )
    return token

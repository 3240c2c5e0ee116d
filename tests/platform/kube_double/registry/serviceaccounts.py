"""ServiceAccounts: the TokenRequest subresource, whose token then authenticates as the
account (with no RBAC permission granted)."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import admission, errors, fieldsets
from ..auth import User
from ..request import Request
from ..store import Store


def token(
    store: Store, tokens: dict[str, User], request: Request, body: dict[str, Any]
) -> dict[str, Any]:
    """TokenRequest: mint a token for the ServiceAccount, which RBAC then grants nothing."""
    route = request.route
    account = store.get("serviceaccounts", (route.namespace or "", route.name or ""))
    if account is None:
        raise errors.not_found(route.resource, route.name or "")
    token = register_service_account(tokens, account)
    spec = copy.deepcopy(body.get("spec") or {})
    spec["audiences"] = spec.get("audiences") or ["https://kubernetes.default.svc.cluster.local"]
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

"""PodDisruptionBudgets: their empty status on create, and how the Eviction API charges them
(kubernetes pkg/registry/core/pod/storage/eviction.go): the one budget covering a pod, the 429
TooManyRequests while it allows no disruption (or has not observed its latest generation), and
the disruption taken otherwise."""

from __future__ import annotations

import copy
from typing import Any

from .. import admission, errors, fieldsets
from ..resources import lookup
from ..store import Store

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


def default(pdb: dict[str, Any], _bound_to: dict[str, Any] | None) -> None:
    """A new budget's status is empty until the disruption controller (absent here) counts."""
    pdb["status"] = {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    }


def covering(store: Store, namespace: str | None, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The budgets in the pod's namespace whose selector matches its labels."""
    return [
        p
        for p in store.objects("poddisruptionbudgets.policy", namespace)
        if _selector_matches((p.get("spec") or {}).get("selector"), labels)
    ]


def charge(store: Store, pdb: dict[str, Any], pod: dict[str, Any], dry_run: bool) -> None:
    """Take one disruption from the budget, or refuse with the server's 429 and its cause."""
    name = pdb["metadata"]["name"]
    status = pdb.get("status") or {}
    if status.get("observedGeneration", 0) < pdb["metadata"].get("generation", 0):
        raise _too_many(f"The disruption budget {name} is still being processed by the server.", 10)
    allowed_now = status.get("disruptionsAllowed", 0)
    if allowed_now <= 0:
        current, desired = status.get("currentHealthy", 0), status.get("desiredHealthy", 0)
        if current > desired:
            raise _too_many(f"The disruption budget {name} does not allow evicting pods currently")
        raise _too_many(
            f"The disruption budget {name} needs {desired} healthy pods and has {current} currently"
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
    store.write(_PDB.storage_key, new)

"""Mutating admission webhooks, called on create as kube-apiserver v1.36 calls them.

The double's create path sends the decoded object through every MutatingWebhookConfiguration in
its store before it validates and stores it (staging/src/k8s.io/apiserver/pkg/admission/plugin/
webhook/mutating/dispatcher.go): configurations in name order, their webhooks in order; a webhook
is called when a rule matches the request (operation, group, version, resource, scope), its
namespaceSelector matches the namespace's labels and its objectSelector the object's, and every
matchCondition (CEL, on `object`) is true. The call is an AdmissionReview v1 over HTTPS, checked
against the configuration's `caBundle`, under its `timeoutSeconds`; the answer's JSONPatch is
applied. A call that fails (no endpoint, refused, timed out, a bad answer) admits the object
unchanged under `failurePolicy: Ignore` and rejects the create under `Fail`, as the real server
does. The service a `clientConfig.service` names is found through `endpoints` (the test's stand-in
for the Service's ready endpoints); reinvocation is not modelled (one webhook at a time here).

Every call is reported to `on_call` with its outcome, so a campaign can check what was admitted.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import jsonpatch
import msgspec

from hostaffinity.affinity.model import LabelSelector
from hostaffinity.affinity.selectors import compile_label_selector
from tests.admission_policy_cel import ENV
from tests.platform.kube_double import errors
from tests.platform.kube_double.resources import Resource
from tests.platform.kube_double.store import Store

CONFIGURATIONS = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
# (namespace, service name) -> the base URLs (https://host:port) of its ready endpoints.
Endpoints = Callable[[str, str], list[str]]


@dataclass(frozen=True)
class WebhookCall:
    """One call's outcome: `patched`, `allowed` (no patch), `denied`, or `failed: <why>`,
    with the object as sent and as the webhook left it (as sent unless patched)."""

    webhook: str
    namespace: str
    name: str
    outcome: str
    failure_policy: str
    endpoint: str
    sent: dict[str, Any]
    admitted: dict[str, Any]


class MutatingWebhooks:
    """The mutating admission stage of the double's create path."""

    def __init__(
        self,
        store: Store,
        endpoints: Endpoints,
        on_call: Callable[[WebhookCall], None] = lambda call: None,
    ) -> None:
        self._store = store
        self._endpoints = endpoints
        self._on_call = on_call
        self._turn = 0

    async def admit(
        self, resource: Resource, obj: dict[str, Any], namespace: str | None, user: str
    ) -> dict[str, Any]:
        """`obj` as the matching webhooks leave it (or ApiError where a `Fail` one fails)."""
        for configuration in sorted(
            self._store.objects(CONFIGURATIONS, None), key=lambda c: c["metadata"]["name"]
        ):
            for webhook in configuration.get("webhooks") or ():
                if self._applies(webhook, resource, obj, namespace):
                    obj = await self._call(webhook, resource, obj, namespace, user)
        return obj

    # -- matching ----------------------------------------------------------------------------

    def _applies(
        self,
        webhook: dict[str, Any],
        resource: Resource,
        obj: dict[str, Any],
        namespace: str | None,
    ) -> bool:
        if not any(_rule_matches(rule, resource, namespace) for rule in webhook.get("rules") or ()):
            return False
        if namespace is not None:
            ns = self._store.get("namespaces", ("", namespace)) or {"metadata": {}}
            labels = {
                **(ns["metadata"].get("labels") or {}),
                "kubernetes.io/metadata.name": namespace,
            }
            if not label_selector_matches(webhook.get("namespaceSelector") or {}, labels):
                return False
        object_labels = (obj.get("metadata") or {}).get("labels") or {}
        if not label_selector_matches(webhook.get("objectSelector") or {}, object_labels):
            return False
        return all(
            ENV.compile(c["expression"]).eval(data={"object": obj}).plain_value() is True
            for c in webhook.get("matchConditions") or ()
        )

    # -- calling -----------------------------------------------------------------------------

    async def _call(
        self,
        webhook: dict[str, Any],
        resource: Resource,
        obj: dict[str, Any],
        namespace: str | None,
        user: str,
    ) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        policy = webhook.get("failurePolicy", "Fail")
        name = meta.get("name") or meta.get("generateName", "")

        def report(outcome: str, endpoint: str, admitted: dict[str, Any] = obj) -> None:
            call = WebhookCall(
                webhook["name"], namespace or "", name, outcome, policy, endpoint, obj, admitted
            )
            self._on_call(call)

        endpoint = ""
        try:
            url, server_name = self._url(webhook["clientConfig"])
            endpoint = url
            review = _review(resource, obj, namespace, user)
            async with asyncio.timeout(webhook.get("timeoutSeconds", 10)):
                answer = await self._post(url, server_name, webhook["clientConfig"], review)
            response = answer["response"]
            if response.get("uid") != review["request"]["uid"]:
                raise ValueError("the answer names another request")
            if not response.get("allowed"):
                report("denied", endpoint)
                message = (response.get("status") or {}).get("message", "")
                raise errors.status(
                    403,
                    "Forbidden",
                    f'admission webhook "{webhook["name"]}" denied the request: {message}',
                )
            if "patch" not in response:
                report("allowed", endpoint)
                return obj
            operations = json.loads(base64.b64decode(response["patch"]))
            patched: dict[str, Any] = jsonpatch.apply_patch(obj, operations)
        except errors.ApiError:
            raise
        except (
            OSError,
            TimeoutError,
            aiohttp.ClientError,
            ValueError,
            KeyError,
            binascii.Error,
            jsonpatch.JsonPatchException,
        ) as failed:
            report(f"failed: {type(failed).__name__}: {failed}"[:200], endpoint)
            if policy == "Ignore":
                return obj
            raise errors.status(
                500,
                "InternalError",
                f'Internal error occurred: failed calling webhook "{webhook["name"]}": {failed}',
            ) from None
        report("patched", endpoint, patched)
        return patched

    def _url(self, client: dict[str, Any]) -> tuple[str, str]:
        """The URL to post to and the name its certificate must carry."""
        if "url" in client:
            url = str(client["url"])
            return url, url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
        service = client["service"]
        ready = self._endpoints(service["namespace"], service["name"])
        if not ready:
            raise ConnectionRefusedError(f'no endpoints available for service "{service["name"]}"')
        self._turn += 1
        base = ready[self._turn % len(ready)]
        return base + service.get("path", "/"), f"{service['name']}.{service['namespace']}.svc"

    @staticmethod
    async def _post(
        url: str, server_name: str, client: dict[str, Any], review: dict[str, Any]
    ) -> dict[str, Any]:
        context = ssl.create_default_context(
            cadata=base64.b64decode(client.get("caBundle") or "").decode() or None
        )
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, json=review, ssl=context, server_hostname=server_name) as response,
        ):
            if response.status != 200:
                raise ValueError(f"the webhook answered {response.status}")
            answer: dict[str, Any] = await response.json()
            return answer


def label_selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector as the API writes it (`{}` selects everything)."""
    return compile_label_selector(msgspec.convert(selector, LabelSelector)).matches(labels)


def _rule_matches(rule: dict[str, Any], resource: Resource, namespace: str | None) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or ()
        return "*" in values or value in values

    scope = rule.get("scope", "*")
    return (
        has("operations", "CREATE")
        and has("apiGroups", resource.group)
        and has("apiVersions", resource.version)
        and has("resources", resource.plural)
        and (scope == "*" or (scope == "Namespaced") == (namespace is not None))
    )


def _review(
    resource: Resource, obj: dict[str, Any], namespace: str | None, user: str
) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    plural = {"group": resource.group, "version": resource.version, "resource": resource.plural}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": plural,
        "requestKind": kind,
        "requestResource": plural,
        "name": meta.get("name", ""),
        "operation": "CREATE",
        "userInfo": {"username": user},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if namespace is not None:
        request["namespace"] = namespace
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}

"""admission.k8s.io/v1 AdmissionReview on the wire: request decoded, response encoded.

Shapes as kube-apiserver v1.36.2 sent and accepted them (fixture
kube-apiserver-admission/pod-create-review.json): the object arrives whole, pods made from a
template have no name yet (key nothing on it), `request.uid` is what the answer echoes, the
patch is base64 of a JSON array with `patchType: JSONPatch`, and the response echoes the
review's apiVersion and kind.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import msgspec

from hostaffinity.admission_webhook.core.mutation import Mutation, MutationSettings, plan_pod


class GroupVersionKind(msgspec.Struct, frozen=True):
    group: str = ""
    version: str = ""
    kind: str = ""


class AdmissionRequest(msgspec.Struct, frozen=True, rename="camel"):
    uid: str
    kind: GroupVersionKind = GroupVersionKind()
    namespace: str = ""
    operation: str = ""
    dry_run: bool = False
    object: dict[str, Any] | None = None


class AdmissionReview(msgspec.Struct, frozen=True, rename="camel"):
    request: AdmissionRequest
    api_version: str = "admission.k8s.io/v1"
    kind: str = "AdmissionReview"


class AdmissionResponse(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    uid: str
    allowed: bool  # no default: always on the wire, the API server requires it
    patch_type: str | None = None
    patch: str | None = None
    warnings: list[str] | None = None


class AdmissionReviewAnswer(msgspec.Struct, frozen=True, rename="camel"):
    api_version: str
    kind: str
    response: AdmissionResponse


_decoder = msgspec.json.Decoder(AdmissionReview)
_encoder = msgspec.json.Encoder()
POD: tuple[str, str] = ("", "Pod")


def decode_review(body: bytes) -> AdmissionReview:
    """The review kube-apiserver sent; one of schema's UNDECODABLE (a 400) when it is not one."""
    return _decoder.decode(body)


def created_pod(review: AdmissionReview) -> dict[str, Any] | None:
    """The pod a CREATE review carries; None for any other review."""
    request = review.request
    if (request.kind.group, request.kind.kind) != POD or request.operation != "CREATE":
        return None
    return request.object


def mutation_for(review: AdmissionReview, settings: MutationSettings) -> Mutation:
    """Only a pod CREATE is ever mutated; anything else the API server sends is let through."""
    pod = created_pod(review)
    return Mutation() if pod is None else plan_pod(pod, settings)


def encode_answer(review: AdmissionReview, mutation: Mutation, advice: Sequence[str] = ()) -> bytes:
    """The allowed answer, with the patch when there is one and the warnings (the planner's,
    then `advice`) when any."""
    patch = patch_type = None
    if mutation.operations:
        patch = base64.b64encode(_encoder.encode(mutation.operations)).decode("ascii")
        patch_type = "JSONPatch"
    response = AdmissionResponse(
        uid=review.request.uid,
        allowed=True,
        patch_type=patch_type,
        patch=patch,
        warnings=[*mutation.warnings, *advice] or None,
    )
    return _encoder.encode(AdmissionReviewAnswer(review.api_version, review.kind, response))

"""Turning any vSphere name into a valid Kubernetes label value."""

import hashlib
import re

MAX_LABEL_VALUE_LENGTH = 63
_HASH_LENGTH = 10
# A label value: empty, or at most 63 characters of [A-Za-z0-9_.-] that start and end with an
# alphanumeric (k8s.io/apimachinery/pkg/util/validation IsValidLabelValue).
_VALID = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_INVALID_RUN = re.compile(r"[^A-Za-z0-9_.-]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def is_valid_label_value(value: str) -> bool:
    """True when the API server would accept `value` as a label value."""
    return len(value) <= MAX_LABEL_VALUE_LENGTH and _VALID.match(value) is not None


def label_value(name: str) -> str:
    """The label value for a vSphere name: the name itself when valid, else prefix-hash.

    The derived form keeps a readable prefix of the name (invalid runs become `-`) and appends a
    short hash of the full name, so two different names never share a value by accident and the
    same name always gives the same value.
    """
    if is_valid_label_value(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:_HASH_LENGTH]
    readable = _EDGE.sub("", _INVALID_RUN.sub("-", name))
    room = MAX_LABEL_VALUE_LENGTH - _HASH_LENGTH - 1
    prefix = _EDGE.sub("", readable[:room])
    return f"{prefix}-{digest}" if prefix else digest

"""Secrets: their defaults on create (core/v1 SetDefaults_Secret: type Opaque), and the
conversion that merges the write-only `stringData` into `data`."""

from __future__ import annotations

import base64
from typing import Any


def default(secret: dict[str, Any], _bound_to: dict[str, Any] | None) -> None:
    if not secret.get("type"):
        secret["type"] = "Opaque"
    for key, value in (secret.pop("stringData", None) or {}).items():
        secret.setdefault("data", {})[key] = base64.b64encode(value.encode()).decode()

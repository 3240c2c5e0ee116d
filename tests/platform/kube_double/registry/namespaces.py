"""Namespaces: their defaults on create (the `kubernetes` finalizer, phase Active)."""

from __future__ import annotations

from typing import Any


def default(namespace: dict[str, Any], _bound_to: dict[str, Any] | None) -> None:
    namespace.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    namespace.setdefault("status", {}).setdefault("phase", "Active")

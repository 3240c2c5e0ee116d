"""Versions: the schema version carried in every event, and the release version every
hostaffinity distribution (the CLI, the services, these libraries) and image carries.

Bump SCHEMA_VERSION only for a change old readers cannot survive; adding a field with a default
is not one (see msgspec's schema-evolution rules: new fields go last, with defaults, types never
change). The release version is written once, in the workspace's pyproject.toml; every member's
pyproject.toml and every image tag in k8s/ and compose.yaml repeat it, and tests/test_release.py
holds them equal.
"""

import importlib.metadata

SCHEMA_VERSION = 1


def release_version(distribution: str) -> str:
    """The installed version of one of our distributions, e.g. `hostaffinity-cli`; "unknown"
    where it is not installed (imported from a bare source tree)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"

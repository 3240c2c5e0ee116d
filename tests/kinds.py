"""Every test's kind -- unit, contract, integration or e2e -- given by where it lives, here only.

The kinds are pytest markers (registered in pyproject.toml), so `pytest -m "unit or contract"`
is the fast loop (`make test-fast`) and a plain `pytest` runs everything (`make test`, CI):

- unit: one module's logic in process (the members' tests), or a static check of the
  repository's files that takes seconds (docs, chart, policies, layout); no server, no simulator.
- contract: the Kubernetes double held to the recorded kube-apiserver (tests/contract), and to
  the real kubectl.
- integration: a real part -- a nats-server, vcsim, the double driving a service's I/O, a
  Prometheus -- or a tool run many times (kustomize over every variant, a wheel installed).
- e2e: the services themselves, in process or as processes, on the real parts.

Nobody decorates a test with its kind: the longest entry of `KINDS` that is a prefix of the
test's path gives it, and a test under none of them fails the collection, naming its file. A
nats-server or a vcsim started by a unit or contract test fails that test
(`refuse_in_fast_tests`): a test that needs one is an integration test, and the fast loop stays
fast. Loaded for every test by the root conftest.py.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable

import pytest

FAST = ("unit", "contract")
KIND_NAMES = (*FAST, "integration", "e2e")

# Path (a folder or a file, relative to the repository root) -> kind. A top-level test module
# is listed by name: a new one must say what it is.
KINDS: dict[str, str] = {
    "libs": "unit",
    "services": "unit",
    "tests/contract": "contract",
    "tests/integration": "integration",
    "tests/e2e": "e2e",
    "tests/containers": "e2e",
    "tests/monitoring/test_alert_series.py": "integration",  # kustomize and helm per variant
    "tests/monitoring/test_monitoring_rules.py": "integration",  # promtool
    "tests/monitoring/test_exposure_default_install.py": "e2e",
    "tests/monitoring/test_prometheus_e2e.py": "e2e",
    "tests/test_admission_policy_cel.py": "unit",
    "tests/test_asyncio_leak_guard.py": "unit",
    "tests/test_bus_setup.py": "unit",
    "tests/test_campaign.py": "e2e",  # four short campaigns and a short soak (~12 min)
    "tests/test_campaign_measures.py": "unit",  # convergence and drift on forged figures
    "tests/test_core_drawing.py": "unit",
    "tests/test_deploy_manifests.py": "integration",  # kustomize over every variant (~40 s)
    "tests/test_docs.py": "unit",
    "tests/test_docs_install.py": "integration",  # kubectl, the double, a TLS vcsim
    "tests/test_docs_lifecycle.py": "integration",
    "tests/test_helm_chart.py": "unit",
    "tests/test_helm_trust.py": "integration",  # a TLS vcsim
    "tests/test_helm_vcenters.py": "unit",
    "tests/test_import_contracts.py": "unit",
    "tests/test_release.py": "integration",  # builds the release and pip-installs its wheel
    "tests/test_repository_hygiene.py": "unit",
    "tests/test_shipped_descheduler_policies.py": "unit",
    "tests/test_test_layout.py": "unit",
    "tests/test_where_things_live.py": "unit",
    "tests/test_write_path_checkpoints.py": "unit",
}

_running: str | None = None  # the kind of the test running now; None outside pytest


def kind_of(path: str) -> str | None:
    """The kind of a test module at `path` (relative, '/'-separated): its longest listed prefix."""
    best: str | None = None
    for prefix in KINDS:
        if (path == prefix or path.startswith(prefix + "/")) and len(prefix) > len(best or ""):
            best = prefix
    return KINDS[best] if best is not None else None


def refuse_in_fast_tests(what: str) -> None:
    """Called where the platform starts `what` (a nats-server, a vcsim): a fast test may not."""
    if _running in FAST:
        raise RuntimeError(
            f"a {_running} test started {what}: a test that needs one is an integration test "
            "(tests/kinds.py)"
        )


def _relative(item: pytest.Item) -> str:
    return item.path.relative_to(item.config.rootpath).as_posix()


def pytest_collection_modifyitems(config: pytest.Config, items: Iterable[pytest.Item]) -> None:
    unplaced: set[str] = set()
    for item in items:
        path = _relative(item)
        if any(item.get_closest_marker(name) for name in KIND_NAMES):
            raise pytest.UsageError(
                f"{item.nodeid} is marked with its kind by hand: kinds go by place (tests/kinds.py)"
            )
        kind = kind_of(path)
        if kind is None:
            unplaced.add(path)
            continue
        item.add_marker(kind)
    if unplaced:
        raise pytest.UsageError(
            "no kind for " + ", ".join(sorted(unplaced)) + ": add it to KINDS in tests/kinds.py"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    global _running
    _running = next((name for name in KIND_NAMES if item.get_closest_marker(name)), None)
    try:
        return (yield)
    finally:
        _running = None

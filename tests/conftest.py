"""Fixtures shared by integration and end-to-end tests; the platform itself is in tests/platform."""

pytest_plugins: list[str] = [
    "tests.platform.nats",
    "tests.platform.nats_cluster",
    "tests.platform.nats_delivery_lag",
    "tests.platform.kube_double.fixture",
    "tests.platform.vcsim",
]

"""Loaded for every test of the workspace, the members' tests and tests/ alike: the leaked-task
guard, and each test's kind (unit, contract, integration, e2e) by where it lives."""

pytest_plugins = ["tests.asyncio_leaks", "tests.kinds"]

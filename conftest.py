"""Loaded for every test of the workspace, the members' tests and tests/ alike."""

pytest_plugins = ["tests.asyncio_leaks"]

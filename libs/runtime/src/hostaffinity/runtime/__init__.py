"""Adapters every service shares: bus, telemetry, config, health, informers, leases, vCenter."""

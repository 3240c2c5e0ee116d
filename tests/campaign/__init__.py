"""The fault campaign: the whole system as processes, a seeded workload and fault schedule, a
recorded history, and a checker of the invariants that must hold after a quiet period
(`python -m tests.campaign --seed S --minutes M`; docs/reliability.md)."""

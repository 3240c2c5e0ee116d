"""The descheduler: repairs affinity, node affinity and taint violations after the fact."""

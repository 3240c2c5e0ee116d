"""drs-translator: Kubernetes ESXi-host affinity becomes DRS rules, and nobody else's is touched."""

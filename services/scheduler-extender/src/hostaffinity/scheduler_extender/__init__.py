"""scheduler-extender: answers kube-scheduler's filter, prioritize and bind for ESXi-host terms."""

"""Pure affinity engine: decides what kube-scheduler decides, with ESXi hosts as a domain."""

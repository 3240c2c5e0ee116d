"""The node-labeller's pure core: its copy of the vCenter inventory, the Node fields it reads,
matching a node to its VM, failure domains from tags, and reconcile, which says what to write for
one topology key.

Like the plugin folders of kube-scheduler and the descheduler, the core holds decisions only; its
shell beside it (vcenter_watch, host_groups, tag_refresh, labeller, metrics, service, main) reads
vCenter and the API server and writes labels and the KV. The core imports no I/O client (nats,
kubernetes_asyncio, pyVmomi, aiohttp) and none of ``hostaffinity.runtime.{bus,kube,vcenter,http}``;
the import-linter contract ``node-labeller-core`` checks it.
"""

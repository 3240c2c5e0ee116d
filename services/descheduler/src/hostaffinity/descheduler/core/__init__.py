"""The descheduler's pure core: the cluster model, the cycle's state, the strategies and the
eviction planner, which decide what to evict from what they are given.

Like the plugin folders of kube-scheduler and the descheduler, the core holds decisions only; its
shell beside it (feeds, executor, intents, reporting, metrics, service, main) reads the cluster
and carries the decisions out. The core imports no I/O client (nats, kubernetes_asyncio, pyVmomi,
aiohttp) and none of ``hostaffinity.runtime.{bus,kube,vcenter,http}``; the import-linter contract
``descheduler-core`` checks it.
"""

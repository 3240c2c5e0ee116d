"""The scheduler extender's pure core: what it knows (the cache and the pods in flight), the
extender/v1 wire format, and the filter and prioritize answers, fleet groups included.

Like the plugin folders of kube-scheduler and the descheduler, the core holds decisions only; its
shell beside it (feeds, http, binder, decision_events, metrics, service, main) feeds the cache,
serves kube-scheduler and binds. The core imports no I/O client (nats, kubernetes_asyncio, pyVmomi,
aiohttp) and none of ``hostaffinity.runtime.{bus,kube,vcenter,http}``; the import-linter contract
``scheduler-extender-core`` checks it.
"""

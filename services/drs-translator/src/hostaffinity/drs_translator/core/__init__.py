"""The DRS translator's pure core: the rules and groups as values, the planner and the fleet
planner that say what DRS should hold, the diff against what vCenter holds, and the report of what
needs a person.

Like the plugin folders of kube-scheduler and the descheduler, the core holds decisions only; its
shell beside it (translator, applier, vCenter cluster, records, announcements, leases, metrics,
service, main) reads pods and vCenter and writes the rules. The core imports no I/O client (nats,
kubernetes_asyncio, pyVmomi, aiohttp) and none of ``hostaffinity.runtime.{bus,kube,vcenter,http}``;
the import-linter contract ``drs-translator-core`` checks it.
"""

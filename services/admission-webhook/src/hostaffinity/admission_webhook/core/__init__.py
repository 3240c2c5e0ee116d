"""The admission webhook's pure core: the mutation planner (pod in, JSONPatch out), the fleet
group terms, the headroom warnings, and the AdmissionReview wire format.

Like the plugin folders of kube-scheduler and the descheduler, the core holds decisions only; its
shell beside it (http, registration, twinless, metrics, service, main) serves the API server, keeps
the webhook registered and records Events. The core imports no I/O client (nats,
kubernetes_asyncio, pyVmomi, aiohttp) and none of ``hostaffinity.runtime.{bus,kube,vcenter,http}``;
the import-linter contract ``admission-webhook-core`` checks it.
"""

"""A Kubernetes API test double, held to kube-apiserver v1.36.2 by tests/contract.

Why not kmock (PyPI `kmock==0.8`, evaluated first): its `KubernetesEmulator` is an
in-memory dict over HTTP. It answers every LIST with the literal resourceVersion `"..."`, keeps
no revision counter and no event history, so a watch cannot start from a resourceVersion, never
sends BOOKMARKs and can never produce the 410 `ERROR` event; it applies every PATCH as a plain
dict merge (no strategic-merge list rules, no null deletes, no JSON patch `test`, no server-side
apply ownership), has no label or field selectors, no paging, no optimistic-concurrency 409s and
no Status bodies shaped like the real server's. Its routing DSL would still leave all of that to
write, so the double is a small aiohttp server of its own instead.

Modules, split as kube-apiserver splits itself (the generic verbs of apiserver's endpoints/handlers
over a store, and what differs by resource in pkg/registry/<group>/<resource>/): `server`
(authentication, discovery, routing, dispatch), the generic verbs `reads` (list, get, as a Table
when asked: `tables`), `watch`, `writes` (create, update, the patch types, delete, commit) over
`store` (revisions, history, watch fan-out); `registry/` one module per resource for what is its
own: `nodes` (printer columns), `pods` (binding, eviction, graceful deletion),
`poddisruptionbudgets` (what an eviction charges), `serviceaccounts` (tokens), `reviews`, `scale`,
and each kind's defaults on create (`namespaces`, `secrets` too); `resources` (the served resources
and their facts), `admission` (validation, conversion, write invariants), `label_keys` (pod
affinity matchLabelKeys / mismatchLabelKeys on create), `patches`, `fieldsets` (managedFields),
`selectors`, `auth`, `discovery` (what kubectl reads before anything else), `protobuf` (the request
bodies kubectl's typed commands send), `request` (one request, the body and JSON plumbing),
`faults` (holds, delays, failures a test sets), `journal` (the requests answered, once a test
asks), `double` (start/stop, over http or https, + test hooks), `fixture` (the `kube_double` pytest
fixture).
"""

from .double import KubeDouble
from .faults import ObjectFault, PatchHold
from .journal import Exchange

__all__ = ["Exchange", "KubeDouble", "ObjectFault", "PatchHold"]

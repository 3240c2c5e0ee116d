"""What differs by resource, one module per resource as kube-apiserver keeps it
(pkg/registry/<group>/<resource>/): the generic verbs (`server`, `reads`, `watch`, `writes`)
ask here for a resource's own behaviour."""

from __future__ import annotations

from ..tables import Printer
from . import nodes

# Printer columns by storage key: `kubectl get` shows these; other resources are listed plainly.
PRINTERS: dict[str, Printer] = {"nodes": nodes.PRINTER}

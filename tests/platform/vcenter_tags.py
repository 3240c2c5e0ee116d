"""Tags on a running vcsim, made as an administrator makes them: through the vSphere Automation
(REST) API under /rest (govmomi vapi/simulator serves it; a real vCenter 6.5 to 8 too).

    tags = VcenterTags(vc)
    zone = tags.category("k8s-zone")
    tags.attach(tags.tag(zone, "zone-a"), "host-21", "HostSystem")
"""

import base64
import json
import urllib.request
from typing import Any

from tests.platform.vcsim import Vcsim

REST = "/rest/com/vmware/cis"


class VcenterTags:
    """One Automation API session on `vc`, for creating categories and tags and (de)tagging."""

    def __init__(self, vc: Vcsim) -> None:
        self._base = f"{vc.protocol}://{vc.host}:{vc.port}"
        login = urllib.request.Request(f"{self._base}{REST}/session", method="POST")
        login.add_unredirected_header(
            "Authorization", "Basic " + _basic(f"{vc.username}:{vc.password}")
        )
        with urllib.request.urlopen(login, timeout=10) as answer:
            self._session = json.loads(answer.read())["value"]

    def category(self, name: str, cardinality: str = "SINGLE") -> str:
        """Create a tag category; returns its id."""
        spec = {"name": name, "description": "", "cardinality": cardinality, "associable_types": []}
        created: str = self._call("POST", "/tagging/category", {"create_spec": spec})
        return created

    def tag(self, category_id: str, name: str) -> str:
        """Create a tag in a category; returns its id."""
        spec = {"name": name, "description": "", "category_id": category_id}
        created: str = self._call("POST", "/tagging/tag", {"create_spec": spec})
        return created

    def attach(self, tag_id: str, moid: str, obj_type: str) -> None:
        body = {"object_id": {"id": moid, "type": obj_type}}
        self._call("POST", f"/tagging/tag-association/id:{tag_id}?~action=attach", body)

    def detach(self, tag_id: str, moid: str, obj_type: str) -> None:
        body = {"object_id": {"id": moid, "type": obj_type}}
        self._call("POST", f"/tagging/tag-association/id:{tag_id}?~action=detach", body)

    def _call(self, method: str, path: str, body: Any) -> Any:
        request = urllib.request.Request(
            f"{self._base}{REST}{path}",
            method=method,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "vmware-api-session-id": self._session},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            payload = answer.read()
        return json.loads(payload).get("value") if payload else None


def _basic(credentials: str) -> str:
    return base64.b64encode(credentials.encode()).decode()

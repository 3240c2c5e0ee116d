"""read_tags against vcsim's Automation (REST) API: what it returns, how it fails, and that one
bad entry (null for a list, an unknown field, a broken record) costs only itself."""

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from hostaffinity.runtime.vcenter.tags import TagReadError, read_tags
from tests.platform.vcenter_tags import VcenterTags
from tests.platform.vcsim import Vcsim, VcsimFactory


async def test_reads_only_the_asked_categories_and_names_the_missing_ones(
    vcsim: VcsimFactory,
) -> None:
    vc = vcsim(hosts=2, vms=0)
    tags = VcenterTags(vc)
    zone, other = tags.category("k8s-zone"), tags.category("backup-policy")
    zone_a = tags.tag(zone, "zone-a")
    tags.attach(zone_a, "host-21", "HostSystem")
    tags.attach(zone_a, "domain-c7", "ClusterComputeResource")
    tags.attach(tags.tag(zone, "zone-b"), "host-21", "HostSystem")
    tags.attach(tags.tag(other, "gold"), "host-21", "HostSystem")
    read = await read_tags(vc.settings(), ["k8s-zone", "k8s-region"])
    assert read.tags == {
        "host-21": {"k8s-zone": ("zone-a", "zone-b")},
        "domain-c7": {"k8s-zone": ("zone-a",)},
    }
    assert read.missing_categories == ("k8s-region",)


async def test_an_unreachable_vcenter_is_a_tag_read_error_naming_it(vcsim: VcsimFactory) -> None:
    vc = vcsim(hosts=1, vms=0)
    settings = vc.settings(port=1)
    with pytest.raises(TagReadError, match=r"vCenter http://127\.0\.0\.1:1: tag API login failed"):
        await read_tags(settings, ["k8s-zone"], timeout_seconds=5)


async def test_a_tag_attached_to_nothing_and_no_categories_at_all_are_empty_not_errors(
    vcsim: VcsimFactory,
) -> None:
    """vcsim answers `null` for an empty list, as govmomi encodes a nil slice: the list of
    categories of a fresh vCenter, and the objects of a tag attached to nothing."""
    vc = vcsim(hosts=2, vms=0)
    nothing = await read_tags(vc.settings(), ["k8s-zone"])
    assert (nothing.tags, nothing.missing_categories, nothing.skipped) == ({}, ("k8s-zone",), ())
    tags = VcenterTags(vc)
    zone = tags.category("k8s-zone")
    tags.tag(zone, "zone-planned")
    tags.attach(tags.tag(zone, "zone-a"), "host-21", "HostSystem")
    read = await read_tags(vc.settings(), ["k8s-zone"])
    assert read.tags == {"host-21": {"k8s-zone": ("zone-a",)}}
    assert read.skipped == ()


async def test_a_broken_association_is_skipped_and_named_and_the_rest_is_read(
    vcsim: VcsimFactory,
) -> None:
    """Through a proxy that adds an unknown field to every association and a broken one among
    them: the unknown field is ignored, the broken entry named, the others read."""
    vc = vcsim(hosts=2, vms=0)
    tags = VcenterTags(vc)
    zone = tags.category("k8s-zone")
    tags.attach(tags.tag(zone, "zone-a"), "host-21", "HostSystem")
    tags.attach(tags.tag(zone, "zone-b"), "domain-c7", "ClusterComputeResource")

    def spoil(value: Any) -> Any:
        broken = {"tag_id": value[0]["tag_id"], "object_ids": [{"type": "HostSystem"}]}
        return [{**entry, "added_in_a_later_release": True} for entry in value] + [broken]

    async with rewriting_proxy(vc, "list-attached-objects-on-tags", spoil) as port:
        read = await read_tags(vc.settings(port=port), ["k8s-zone"])
    assert read.tags == {
        "host-21": {"k8s-zone": ("zone-a",)},
        "domain-c7": {"k8s-zone": ("zone-b",)},
    }
    (skipped,) = read.skipped
    assert "(list-attached-objects-on-tags)" in skipped
    assert "missing required field `id`" in skipped


@contextlib.asynccontextmanager
async def rewriting_proxy(
    vc: Vcsim, action: str, rewrite: Callable[[Any], Any]
) -> AsyncIterator[int]:
    """vcsim's REST API on a port of its own, the `value` of `action`'s answers rewritten."""

    async def forward(request: web.Request) -> web.Response:
        url = f"http://{vc.host}:{vc.port}{request.rel_url}"
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with (
            aiohttp.ClientSession() as http,
            http.request(request.method, url, headers=headers, data=await request.read()) as got,
        ):
            body = await got.read()
            if request.query.get("~action") == action:
                answer = json.loads(body)
                body = json.dumps({"value": rewrite(answer["value"])}).encode()
            return web.Response(status=got.status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()

"""drs-translator with two vCenters (two vcsim instances): each vCenter's rules go to it alone,
its ownership records name it, replicas in two vCenters make no rule, and a vCenter that stops
answering holds back only its own work: readiness names it degraded, not "not ready"."""

import asyncio

from hostaffinity.drs_translator.config import DrsSettings
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.schema import DrsRulesApplied
from tests.e2e.drs_harness import (
    anti_rules,
    cluster_of,
    drs_config,
    pod_manifest,
    records,
    running_translator,
    vm,
)
from tests.e2e.labeller_harness import LabellerParts, eventually, stream_events

WEB_A, WEB_B, SPLIT = {"app": "web-a"}, {"app": "web-b"}, {"app": "split"}


async def test_each_vcenter_gets_its_own_rules_and_goes_on_when_the_other_stops(
    parts: LabellerParts, bus: Bus
) -> None:
    two = parts.two_vcenters()
    clusters = {"vc-a": cluster_of(two.admin_a)._moId, "vc-b": cluster_of(two.admin_b)._moId}
    async with parts.labeller(two.a, vcenters=two.settings):
        # vc-b first: its failure below must not hold back vc-a's cycle after it.
        config = drs_config(
            two.a,
            parts.nats,
            parts.kubeconfig,
            vcenters=two.settings[::-1],
            drs=DrsSettings(error_retry_seconds=0.5),
        )
        async with running_translator(config) as translator:
            kube = parts.kube
            kube.seed(pod_manifest("wa2", "a2", WEB_A, apart_from=WEB_A))
            kube.seed(pod_manifest("wa3", "a3", WEB_A, apart_from=WEB_A))
            kube.seed(pod_manifest("wb1", "b1", WEB_B, apart_from=WEB_B))
            kube.seed(pod_manifest("wb2", "b2", WEB_B, apart_from=WEB_B))
            # Replicas in two vCenters never share a host: no rule for them anywhere.
            kube.seed(pod_manifest("s1", "a1", SPLIT, apart_from=SPLIT))
            kube.seed(pod_manifest("s2", "b1", SPLIT, apart_from=SPLIT))
            in_a = sorted([vm(two.admin_a, "a2"), vm(two.admin_a, "a3")])
            in_b = sorted([vm(two.admin_b, "b1"), vm(two.admin_b, "b2")])
            assert in_a != in_b  # so a rule sent to the wrong vCenter would show
            await eventually(
                lambda: list(anti_rules(two.admin_a).values()) == [in_a]
                and list(anti_rules(two.admin_b).values()) == [in_b],
                "one rule in each vCenter, with that vCenter's VMs",
            )
            owned = {
                (record.vcenter, record.cluster_moid, tuple(record.vms))
                for record in (await records(bus)).values()
            }
            assert owned == {
                ("vc-a", clusters["vc-a"], tuple(in_a)),
                ("vc-b", clusters["vc-b"], tuple(in_b)),
            }
            keys = sorted(await records(bus))
            assert [key.split(".")[1] for key in keys] == ["vc-a", "vc-b"]

            # vc-b goes away (stopped off the loop: the Leases keep renewing); vc-a's rules
            # still follow its pods.
            await asyncio.to_thread(two.b.stop)
            kube.seed(pod_manifest("wa1", "a1", WEB_A, apart_from=WEB_A))
            everyone = sorted([vm(two.admin_a, "a1"), *in_a])
            await eventually(
                lambda: list(anti_rules(two.admin_a).values()) == [everyone],
                "vc-a's rule grown while vc-b is down",
            )
            # A change vc-b's rule must follow: its cycle now needs vc-b, and fails.
            kube.delete("v1", "pods", "wb2", "default")
            health = translator.runner.health
            await eventually(
                lambda: "vcenter connected: vc-b" in health.readiness().degraded,
                "vc-b's failing cycles shown as degraded",
            )
            readiness = health.readiness()
            assert readiness.ready
            (part,) = [p for p in readiness.parts if p.name == "vcenter connected: vc-b"]
            assert part.detail.startswith("away since ")

    applied = [e for e in await stream_events(bus) if isinstance(e, DrsRulesApplied)]
    assert {e.vcenter for e in applied} == {"vc-a", "vc-b"}
    assert all(event.cluster_moid == clusters[event.vcenter] for event in applied)

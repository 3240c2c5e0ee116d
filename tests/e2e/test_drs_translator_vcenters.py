"""drs-translator with two vCenters (two vcsim instances): each vCenter's rules go to it alone,
its ownership records name it, replicas in two vCenters make no rule, and a vCenter that stops
answering holds back only its own work."""

import asyncio
from pathlib import Path

from hostaffinity.drs_translator.config import DrsSettings
from hostaffinity.runtime.bus import Bus
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
from tests.e2e.labeller_harness import (
    eventually,
    labeller_config,
    node_object,
    running,
    stream_events,
    wait_ready,
)
from tests.platform.kube_double import KubeDouble
from tests.platform.nats import NatsServer
from tests.platform.vcsim import VcsimFactory

A_NODES = ["a1", "a2", "a3"]
B_NODES = ["b1", "b2"]
WEB_A, WEB_B, SPLIT = {"app": "web-a"}, {"app": "web-b"}, {"app": "split"}


async def test_each_vcenter_gets_its_own_rules_and_goes_on_when_the_other_stops(
    vcsim: VcsimFactory,
    nats_server: NatsServer,
    kube_double: KubeDouble,
    kubeconfig: Path,
    bus: Bus,
) -> None:
    vc_a, vc_b = vcsim(hosts=3, vm_names=A_NODES), vcsim(hosts=2, vm_names=B_NODES)
    admin_a, admin_b = vc_a.connect(), vc_b.connect()
    clusters = {"vc-a": cluster_of(admin_a)._moId, "vc-b": cluster_of(admin_b)._moId}
    for name in A_NODES + B_NODES:
        kube_double.seed(node_object(name))
    vcenters = [vc_a.settings(name="vc-a"), vc_b.settings(name="vc-b")]
    fast = DrsSettings(error_retry_seconds=0.5)
    async with running(labeller_config(vc_a, nats_server, kubeconfig, vcenters=vcenters)) as nl:
        await wait_ready(nl)
        # vc-b first: its failure below must not hold back vc-a's cycle after it.
        reverse = vcenters[::-1]
        config = drs_config(vc_a, nats_server, kubeconfig, vcenters=reverse, drs=fast)
        async with running_translator(config):
            kube_double.seed(pod_manifest("wa2", "a2", WEB_A, apart_from=WEB_A))
            kube_double.seed(pod_manifest("wa3", "a3", WEB_A, apart_from=WEB_A))
            kube_double.seed(pod_manifest("wb1", "b1", WEB_B, apart_from=WEB_B))
            kube_double.seed(pod_manifest("wb2", "b2", WEB_B, apart_from=WEB_B))
            # Replicas in two vCenters never share a host: no rule for them anywhere.
            kube_double.seed(pod_manifest("s1", "a1", SPLIT, apart_from=SPLIT))
            kube_double.seed(pod_manifest("s2", "b1", SPLIT, apart_from=SPLIT))
            in_a = sorted([vm(admin_a, "a2"), vm(admin_a, "a3")])
            in_b = sorted([vm(admin_b, "b1"), vm(admin_b, "b2")])
            assert in_a != in_b  # so a rule sent to the wrong vCenter would show
            await eventually(
                lambda: list(anti_rules(admin_a).values()) == [in_a]
                and list(anti_rules(admin_b).values()) == [in_b],
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
            await asyncio.to_thread(vc_b.stop)
            kube_double.seed(pod_manifest("wa1", "a1", WEB_A, apart_from=WEB_A))
            everyone = sorted([vm(admin_a, "a1"), *in_a])
            await eventually(
                lambda: list(anti_rules(admin_a).values()) == [everyone],
                "vc-a's rule grown while vc-b is down",
            )

    applied = [e for e in await stream_events(bus) if isinstance(e, DrsRulesApplied)]
    assert {e.vcenter for e in applied} == {"vc-a", "vc-b"}
    assert all(event.cluster_moid == clusters[event.vcenter] for event in applied)

"""`hostaffinity seed-vcsim`: one VM per Kubernetes node, spread over hosts, idempotent."""

from collections import Counter
from pathlib import Path

import pytest

from hostaffinity.cli.main import main, node_names, vcenter_settings
from hostaffinity.cli.seeding import seed_node_vms
from hostaffinity.runtime.vcenter.session import connect
from tests.platform.kube_double import KubeDouble
from tests.platform.vcsim import VcsimFactory

NODES = ["kind-control-plane", "kind-worker", "kind-worker2", "kind-worker3"]


async def test_seeding_creates_a_vm_per_node_once(
    vcsim: VcsimFactory, kube_double: KubeDouble, tmp_path: Path
) -> None:
    for name in NODES:
        kube_double.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    vc = vcsim(hosts=2, vms=0)
    names = await node_names(str(kube_double.write_kubeconfig(tmp_path / "kubeconfig")))
    assert sorted(names) == sorted(NODES)

    first = seed_node_vms(connect(vcenter_settings(vc.url)), names)
    assert sorted(first.created) == sorted(NODES)
    assert Counter(first.created.values()) == {"DC0_C0_H0": 2, "DC0_C0_H1": 2}
    again = seed_node_vms(connect(vc.settings()), names)
    assert again.created == {}
    assert again.existing == sorted(NODES)


def test_a_bad_vcenter_url_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["seed-vcsim", "--vcenter", "vcsim:8989", "--nodes", "a"])
    assert exited.value.code == 1
    assert "expected a URL like http://user:pass@host:8989/sdk" in capsys.readouterr().err

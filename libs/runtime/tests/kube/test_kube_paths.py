"""API paths: a name is one path segment, whatever characters it holds."""

from hostaffinity.runtime.kube.client import NODES, ResourceRef


def test_plain_names_are_unchanged() -> None:
    assert NODES.path() == "/api/v1/nodes"
    assert NODES.path("worker-1.example.com") == "/api/v1/nodes/worker-1.example.com"
    leases = ResourceRef("coordination.k8s.io", "v1", "leases", "kube-system")
    assert leases.path("x") == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x"


def test_a_name_never_becomes_a_query_or_a_subresource() -> None:
    assert NODES.path("x?dryRun=All") == "/api/v1/nodes/x%3FdryRun%3DAll"
    assert NODES.path("a/b") == "/api/v1/nodes/a%2Fb"
    assert NODES.path("a#b") == "/api/v1/nodes/a%23b"
    pods = ResourceRef("", "v1", "pods", "ns?x=1")
    assert pods.path("p") == "/api/v1/namespaces/ns%3Fx%3D1/pods/p"

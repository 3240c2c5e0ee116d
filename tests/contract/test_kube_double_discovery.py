"""The double's discovery, as the real kubectl reads it: `/version`, `/api`, `/apis` and each
group version's resources (kube-apiserver v1.36's shapes), so that the commands the docs give
(`kubectl apply`, `create secret`, `get`) run against it; and the NamespaceLifecycle refusal of
an object in a namespace that does not exist, whichever way it is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.platform.kube_double.discovery import SERVER_VERSION
from tests.platform.kubectl import kubectl_on_a_double

CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "settings", "namespace": "site"},
    "data": {"a": "1"},
}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "site"}}


async def test_kubectl_reads_the_server_version_and_its_resources(tmp_path: Path) -> None:
    async with kubectl_on_a_double(tmp_path) as (_double, kubectl):
        version = await kubectl.run(["version", "-o", "json"])
        assert version.returncode == 0, version.stderr
        assert json.loads(version.stdout)["serverVersion"]["gitVersion"] == SERVER_VERSION
        listed = await kubectl.run(["api-resources", "-o", "name"])
        assert listed.returncode == 0, listed.stderr
        names = set(listed.stdout.split())
        assert {"namespaces", "secrets", "deployments.apps", "jobs.batch"} <= names
        assert "pods/status" not in names  # subresources are not resource types
        # A short name, as the real server lists it.
        got = await kubectl.run(["get", "ns", "kube-system", "-o", "name"])
        assert (got.returncode, got.stdout) == (0, "namespace/kube-system\n"), got.stderr


async def test_an_object_in_a_missing_namespace_is_refused(tmp_path: Path) -> None:
    """NamespaceLifecycle: a Secret before its namespace is a 404 naming the namespace, by
    `create`, client-side and server-side apply alike; once the namespace exists, all work."""
    manifest = tmp_path / "configmap.yaml"
    manifest.write_text(yaml.safe_dump(CONFIGMAP))
    async with kubectl_on_a_double(tmp_path) as (double, kubectl):
        secret = ["-n", "site", "create", "secret", "generic", "s", "--from-literal=k=v"]
        ways = {
            "create": secret,
            "apply": ["apply", "--validate=false", "-f", str(manifest)],
            "server-side": ["apply", "--server-side", "--validate=false", "-f", str(manifest)],
        }
        for way, args in ways.items():
            refused = await kubectl.run(args)
            assert refused.returncode == 1, way
            assert 'namespaces "site" not found' in refused.stderr, (way, refused.stderr)
        double.seed(NAMESPACE)
        for way, args in ways.items():
            if way == "apply":  # the server-side apply below takes the ConfigMap over
                continue
            done = await kubectl.run(args)
            assert done.returncode == 0, (way, done.stderr)
        stored = double.read("v1", "configmaps", "settings", "site")
        assert stored is not None
        assert stored["data"] == {"a": "1"}
        assert [e["operation"] for e in stored["metadata"]["managedFields"]] == ["Apply"]
        # kubectl sent the Secret in protobuf: it is stored as the JSON form reads it back.
        secret = await kubectl.run(["-n", "site", "get", "secret", "s", "-o", "json"])
        assert secret.returncode == 0, secret.stderr
        assert json.loads(secret.stdout)["data"] == {"k": "dg=="}
        assert json.loads(secret.stdout)["type"] == "Opaque"

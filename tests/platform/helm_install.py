"""`helm install` and `helm upgrade` as the docs run them, for the docs' tests: the chart rendered
by Helm's own engine (helm-python-sdk), then applied with the real kubectl in Helm's order, to
the cluster of $KUBECONFIG (the Kubernetes double).

Helm's order (helm v4 pkg/action/install.go and upgrade.go, pkg/release/v1/util/kind_sorter.go):
the release record is stored first, a Secret `sh.helm.release.v1.<release>.v<revision>` in the
release namespace (so a namespace that does not exist stops the install there, as it does
Helm's); then the `pre-<install|upgrade>` hooks by weight, then the release's objects by kind
(`INSTALL_ORDER`), then the `post-` hooks; it prints the chart's NOTES last. Objects are applied
server-side with the field manager `helm`, as Helm v4 applies them. What Helm does beyond that
(waiting for hooks to finish, recording the release's manifest) is not needed to check a page.

    python -m tests.platform.helm_install install hostaffinity dist/hostaffinity-0.2.0.tgz \
        -n hostaffinity -f my-values.yaml [--set-file vcenter.secret.caCrt=vmca-root.crt]
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from tests.platform.kubectl import kubectl_binary

# Helm's InstallOrder (kind_sorter.go): what others refer to first, the webhooks last; a kind
# not listed goes after all of them.
INSTALL_ORDER = (
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
    "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
    "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
    "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
    "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
)  # fmt: skip
HOOK = "helm.sh/hook"


def _rank(document: dict[str, Any]) -> int:
    kind = document["kind"]
    return INSTALL_ORDER.index(kind) if kind in INSTALL_ORDER else len(INSTALL_ORDER)


def _set(values: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        values = values.setdefault(key, {})
    values[leaf] = value


def _values(files: Sequence[str], set_files: Sequence[str]) -> dict[str, Any]:
    """`-f` files merged in order (later wins, maps merged key by key), then `--set-file`."""
    merged: dict[str, Any] = {}

    def merge(into: dict[str, Any], change: dict[str, Any]) -> None:
        for key, value in change.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = value

    for name in files:
        merge(merged, yaml.safe_load(Path(name).read_text(encoding="utf-8")) or {})
    for assignment in set_files:
        key, _, path = assignment.partition("=")
        _set(merged, key, Path(path).read_text(encoding="utf-8"))
    return merged


def _apply(documents: list[dict[str, Any]], namespace: str) -> None:
    """Apply server-side in the given order; a refusal stops the command, as it stops Helm."""
    if not documents:
        return
    applied = subprocess.run(
        [str(kubectl_binary()), "apply", "--server-side", "--field-manager=helm",
         "--force-conflicts", "--validate=false", "-n", namespace, "-f", "-"],
        input=yaml.safe_dump_all(documents), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if applied.returncode != 0:
        sys.exit(f"Error: {applied.stderr.strip()}")


def _record(release: str, namespace: str, revision: int, values: dict[str, Any]) -> None:
    """The release record Helm stores before anything else (storage driver `secret`), with
    the values it was given (what --reuse-values takes up)."""
    name = f"sh.helm.release.v1.{release}.v{revision}"
    stored = subprocess.run(
        [str(kubectl_binary()), "-n", namespace, "create", "secret", "generic", name,
         "--type=helm.sh/release.v1", f"--from-literal=values={json.dumps(values)}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if stored.returncode != 0:
        sys.exit(f"Error: INSTALLATION FAILED: {stored.stderr.strip()}")


def _last(release: str, namespace: str) -> tuple[int, dict[str, Any]]:
    """The last revision stored for the release and its values (0 and none before any)."""
    listed = subprocess.run(
        [str(kubectl_binary()), "-n", namespace, "get", "secrets", "-o", "json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    prefix = f"sh.helm.release.v1.{release}.v"
    records = {
        int(item["metadata"]["name"].removeprefix(prefix)): item["data"]["values"]
        for item in json.loads(listed.stdout or '{"items": []}')["items"]
        if item["metadata"]["name"].startswith(prefix)
    }
    if not records:
        return 0, {}
    last = max(records)
    loaded: dict[str, Any] = json.loads(base64.b64decode(records[last]))
    return last, loaded


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="helm")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in ("install", "upgrade"):
        sub = commands.add_parser(command)
        sub.add_argument("release")
        sub.add_argument("chart")
        sub.add_argument("-n", "--namespace", default="default")
        sub.add_argument("-f", "--values", action="append", default=[])
        sub.add_argument("--set-file", action="append", default=[])
        sub.add_argument("--reuse-values", action="store_true")
    args = parser.parse_args(argv)
    helm.disable_logging()
    chart_path = Path(args.chart)
    chart = (
        helm.Chart.load_archive(chart_path.read_bytes())
        if chart_path.is_file()
        else helm.Chart.load(chart_path)
    )
    installing = args.command == "install"
    last, last_values = (0, {}) if installing else _last(args.release, args.namespace)
    values = _values(args.values, args.set_file)
    if args.reuse_values:
        values = {**last_values, **values}
    revision = last + 1
    _record(args.release, args.namespace, revision, values)
    try:
        rendered = chart.render(
            values,
            name=args.release,
            namespace=args.namespace,
            is_install=installing,
        )
    except helm.HelmError as error:
        sys.exit(f"Error: {error}")
    notes = "".join(text for path, text in rendered.items() if path.endswith("NOTES.txt"))
    documents = [
        d
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt")
        for d in yaml.safe_load_all(text)
        if d
    ]
    phase = "install" if installing else "upgrade"

    def hooks(when: str) -> list[dict[str, Any]]:
        chosen = [
            d
            for d in documents
            if f"{when}-{phase}" in d["metadata"].get("annotations", {}).get(HOOK, "").split(",")
        ]
        weight = "helm.sh/hook-weight"
        return sorted(
            chosen, key=lambda d: (int(d["metadata"]["annotations"].get(weight, "0")), _rank(d))
        )

    _apply(hooks("pre"), args.namespace)
    plain = [d for d in documents if HOOK not in d["metadata"].get("annotations", {})]
    _apply(sorted(plain, key=_rank), args.namespace)
    _apply(hooks("post"), args.namespace)
    print(f"NAME: {args.release}\nNAMESPACE: {args.namespace}\nREVISION: {revision}\n")
    print(f"NOTES:\n{notes}")


if __name__ == "__main__":
    main()

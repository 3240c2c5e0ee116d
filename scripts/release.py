"""`make release`: what an operator installs, versioned, written into dist/ (ignored by git).

- `hostaffinity-<version>-<variant>.yaml`: one install manifest per variant, k8s/base with the
  variant's component rendered onto it (scripts/manifests.py), in kustomize's order (the
  Namespace first), for `kubectl apply --server-side -f`;
- `hostaffinity-<version>-dashboard.yaml`: the monitoring variant's Grafana dashboard, without a
  namespace, for `kubectl apply -n <Grafana's namespace> -f`;
- `hostaffinity_cli-<version>-py3-none-any.whl`: the CLI as one distribution, carrying the
  schema, affinity and runtime packages it imports, so its only dependencies are third-party
  ones from PyPI and no name of ours can be served by an index instead (a dependency-confusion
  hole when our libraries were wheels of their own, unknown to PyPI): `pip install <wheel>`,
  `uv tool install <wheel>` or `pipx install <wheel>` installs it; and `constraints.txt`, the
  third-party versions uv.lock tested (`-c dist/constraints.txt` installs exactly those);
- `hostaffinity-<version>.tgz`: the Helm chart (charts/hostaffinity), for `helm install`.

The version is the workspace's (pyproject.toml); the release stops if any member, any image in
k8s/ or the chart (version, appVersion) says another.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import yaml

from scripts.manifests import ROOT, kustomize_order, render

DIST = ROOT / "dist"
CHART = ROOT / "charts" / "hostaffinity"
IMAGE_PREFIX = "ghcr.io/hostaffinity/"
# The variant's name in the file name -> the components rendered onto k8s/base.
VARIANTS: dict[str, tuple[str, ...]] = {
    "base": (),
    "scheduler-extender": ("scheduler-extender",),
    "admission-policy": ("admission-policy",),
    "monitoring": ("monitoring",),
    "cert-manager": ("cert-manager",),
}
# The Grafana dashboard's ConfigMap: a manifest of its own, applied in Grafana's namespace.
DASHBOARD = ("ConfigMap", "hostaffinity-dashboard")
# The distribution the release ships the CLI as; the workspace members it imports go inside it.
CLI = "hostaffinity-cli"


def workspace_version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def member_versions() -> dict[str, str]:
    """Each workspace member's name -> the version its pyproject.toml gives it."""
    found = {}
    for pyproject in sorted(ROOT.glob("*/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        found[project["name"]] = project["version"]
    return found


def our_images(documents: list[dict[str, Any]]) -> set[str]:
    """Every hostaffinity image the documents' pods run (init containers included)."""
    images = set()
    for document in documents:
        template = document.get("spec", {}).get("template", {})
        if document["kind"] == "CronJob":
            template = document["spec"]["jobTemplate"]["spec"]["template"]
        pod = template.get("spec", {})
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            if container["image"].startswith(IMAGE_PREFIX):
                images.add(container["image"])
    return images


def chart_versions() -> dict[str, str]:
    """The Helm chart's version and appVersion (both are the release's)."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    return {"chart version": str(chart["version"]), "chart appVersion": str(chart["appVersion"])}


def disagreements(version: str) -> list[str]:
    """Every place that names a release version other than `version`."""
    named = {**member_versions(), **chart_versions()}
    wrong = [f"{name} {v}" for name, v in named.items() if v != version]
    for variant, components in VARIANTS.items():
        wrong += [
            f"{variant}: {image}"
            for image in sorted(our_images(render(*components)))
            if image.rpartition(":")[2] != version
        ]
    return wrong


def is_dashboard(document: dict[str, Any]) -> bool:
    return (document["kind"], document["metadata"]["name"]) == DASHBOARD


def variant_documents(components: tuple[str, ...]) -> list[dict[str, Any]]:
    """What a variant's manifest installs: k8s/base with its components, in kustomize's order,
    less the Grafana dashboard, which goes where Grafana reads (`dashboard_document`)."""
    return [d for d in kustomize_order(render(*components)) if not is_dashboard(d)]


def dashboard_document() -> dict[str, Any]:
    """The dashboard ConfigMap with no namespace: `kubectl apply -n <Grafana's namespace> -f`
    puts it where Grafana's sidecar reads, which the install manifests cannot know."""
    (dashboard,) = [d for d in render("monitoring") if is_dashboard(d)]
    del dashboard["metadata"]["namespace"]
    return dashboard


def write_manifests(version: str, dist: Path = DIST) -> list[Path]:
    written = []
    for variant, components in VARIANTS.items():
        path = dist / f"hostaffinity-{version}-{variant}.yaml"
        path.write_text(
            f"# hostaffinity {version}: k8s/base"
            + "".join(f" + k8s/components/{c}" for c in components)
            + " (make release)\n"
            + yaml.safe_dump_all(variant_documents(components), sort_keys=False),
            encoding="utf-8",
        )
        written.append(path)
    path = dist / f"hostaffinity-{version}-dashboard.yaml"
    path.write_text(
        f"# hostaffinity {version}: the Grafana dashboard of k8s/components/monitoring, for "
        "`kubectl apply -n <Grafana's namespace> -f` (make release)\n"
        + yaml.safe_dump(dashboard_document(), sort_keys=False),
        encoding="utf-8",
    )
    return [*written, path]


def _normalized(name: str) -> str:
    """A distribution name as indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _normalized(re.split(r"[\s\[<>=!~;(@]", requirement.strip(), maxsplit=1)[0])


def workspace_members() -> dict[str, Path]:
    """Each workspace member's normalized name -> its folder."""
    return {
        _normalized(tomllib.loads(pyproject.read_text())["project"]["name"]): pyproject.parent
        for pyproject in sorted(ROOT.glob("*/*/pyproject.toml"))
    }


def _project(folder: Path) -> dict[str, Any]:
    return dict(tomllib.loads((folder / "pyproject.toml").read_text())["project"])


def cli_closure() -> tuple[list[Path], list[str]]:
    """The folders of the CLI and of every workspace member it needs (the CLI's first), and the
    third-party requirements all of them declare, as they declare them."""
    members = workspace_members()
    folders: list[Path] = []
    third_party: set[str] = set()
    pending = [_normalized(CLI)]
    while pending:
        folder = members[pending.pop(0)]
        if folder in folders:
            continue
        folders.append(folder)
        for requirement in _project(folder).get("dependencies", []):
            name = _requirement_name(requirement)
            if name in members:
                pending.append(name)
            else:
                third_party.add(requirement)
    return folders, sorted(third_party)


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def cli_wheel_project(version: str, requirements: list[str]) -> str:
    """pyproject.toml of the one CLI distribution: the CLI's own name, entry points and build
    backend, every bundled member's third-party requirements, and no member as a dependency."""
    cli = tomllib.loads((workspace_members()[_normalized(CLI)] / "pyproject.toml").read_text())
    project, backend = cli["project"], cli["build-system"]
    scripts = "".join(
        f"{name} = {json.dumps(target)}\n" for name, target in project["scripts"].items()
    )
    return (
        "[project]\n"
        f"name = {json.dumps(project['name'])}\n"
        f"version = {json.dumps(version)}\n"
        f"description = {json.dumps(project['description'])}\n"
        f"requires-python = {json.dumps(project['requires-python'])}\n"
        f"dependencies = {_toml_list(requirements)}\n\n"
        f"[project.scripts]\n{scripts}\n"
        "[build-system]\n"
        f"requires = {_toml_list(backend['requires'])}\n"
        f"build-backend = {json.dumps(backend['build-backend'])}\n\n"
        "[tool.hatch.build.targets.wheel]\n"
        'packages = ["src/hostaffinity"]\n'
    )


def build_cli_wheel(version: str, out_dir: Path) -> Path:
    """The CLI wheel, built from a staging project that holds the packages of the CLI and of the
    members it needs (each member's src/hostaffinity/<package>)."""
    folders, requirements = cli_closure()
    with tempfile.TemporaryDirectory(prefix="hostaffinity-cli-wheel-") as staging:
        packages = Path(staging) / "src" / "hostaffinity"
        for folder in folders:
            for package in sorted((folder / "src" / "hostaffinity").iterdir()):
                shutil.copytree(
                    package,
                    packages / package.name,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                )
        (Path(staging) / "pyproject.toml").write_text(
            cli_wheel_project(version, requirements), encoding="utf-8"
        )
        subprocess.run(
            ["uv", "build", "--quiet", "--wheel", "--out-dir", str(out_dir), staging],
            check=True,
            cwd=ROOT,
        )
    return out_dir / f"{CLI.replace('-', '_')}-{version}-py3-none-any.whl"


def build_wheels(version: str) -> list[Path]:
    """The CLI wheel and constraints.txt: the third-party versions uv.lock tested."""
    wheel = build_cli_wheel(version, DIST)
    exported = subprocess.run(
        ["uv", "export", "--frozen", "--quiet", "--package", CLI, "--no-dev",
         "--no-hashes", "--no-emit-workspace", "--no-header", "--no-annotate"],
        check=True, cwd=ROOT, capture_output=True, text=True,
    ).stdout  # fmt: skip
    (DIST / "constraints.txt").write_text(exported, encoding="utf-8")
    return [wheel, DIST / "constraints.txt"]


def package_chart() -> Path:
    """charts/hostaffinity as `helm package` makes it, by Helm's own engine (its files/ links
    into k8s/ are packaged as the files they point at)."""
    import helm_python as helm  # a dev dependency, loaded only to package the chart

    helm.disable_logging()  # Helm notes each followed link at INFO
    return Path(helm.package(CHART, destination=DIST))


def main() -> int:
    version = workspace_version()
    if wrong := disagreements(version):
        print(f"release: not version {version}: {', '.join(wrong)}", file=sys.stderr)
        return 1
    shutil.rmtree(DIST, ignore_errors=True)
    DIST.mkdir()
    for path in [*write_manifests(version), *build_wheels(version), package_chart()]:
        print(f"release: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

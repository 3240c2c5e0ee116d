"""One release version everywhere, and `make release` as an operator would use what it writes:
from a fresh checkout, versioned manifests per variant and a CLI wheel that `uv tool install`
turns into a `hostaffinity` answering `--version`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import helm_python as helm
import pytest
import yaml

from hostaffinity.cli.main import main
from hostaffinity.schema.version import release_version
from scripts.manifests import load_all, render
from scripts.release import (
    VARIANTS,
    WHEELS,
    disagreements,
    our_images,
    variant_documents,
    workspace_version,
)

ROOT = Path(__file__).resolve().parents[1]
SERVICES = sorted(p.parent.name for p in (ROOT / "services").glob("*/pyproject.toml"))
VERSION = workspace_version()


def test_every_member_and_every_image_names_the_workspace_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    assert disagreements(VERSION) == []
    shipped = our_images(render("scheduler-extender"))
    assert shipped == {f"ghcr.io/hostaffinity/{service}:{VERSION}" for service in SERVICES}


def test_compose_names_the_images_as_k8s_does_with_one_override() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    built = {name: s for name, s in compose["services"].items() if "build" in s}
    assert {s["build"]["args"]["SERVICE"] for s in built.values()} == set(SERVICES)
    for name, service in built.items():
        folder = service["build"]["args"]["SERVICE"]
        expected = f"${{IMAGE_PREFIX:-ghcr.io/hostaffinity}}/{folder}:${{IMAGE_TAG:-{VERSION}}}"
        assert service["image"] == expected, name


def test_the_cli_and_every_service_carry_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"hostaffinity {VERSION}\n"
    for service in SERVICES:  # what the runner's --version prints
        assert release_version(f"hostaffinity-{service}") == VERSION, service


def fresh_checkout(destination: Path) -> Path:
    """What a clone of this tree holds: tracked and new files, nothing git ignores (no .venv,
    no dist/, no build/)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


@pytest.mark.timeout(900)
def test_a_fresh_checkout_releases_manifests_and_an_installable_cli(tmp_path: Path) -> None:
    checkout = fresh_checkout(tmp_path / "hostaffinity")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV"))}
    made = subprocess.run(
        ["make", "release"], cwd=checkout, env=environment, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stdout + made.stderr
    dist = checkout / "dist"
    for variant, components in VARIANTS.items():
        documents = load_all(dist / f"hostaffinity-{VERSION}-{variant}.yaml")
        assert documents[0]["kind"] == "Namespace", variant
        assert {(d["kind"], d["metadata"]["name"]) for d in documents} == {
            (d["kind"], d["metadata"]["name"]) for d in variant_documents(components)
        }, variant
        assert {i.rpartition(":")[2] for i in our_images(documents)} == {VERSION}, variant
    wheels = sorted(p.name for p in dist.glob("*.whl"))
    assert wheels == sorted(f"{w.replace('-', '_')}-{VERSION}-py3-none-any.whl" for w in WHEELS)
    chart = helm.Chart.load_archive((dist / f"hostaffinity-{VERSION}.tgz").read_bytes())
    assert (chart.version, chart.metadata["appVersion"]) == (VERSION, VERSION)
    rendered = chart.render({}, name="hostaffinity", namespace="hostaffinity", is_install=True)
    # files/ links into k8s/ are packed as the files: the NATS config is in its ConfigMap.
    assert any("include auth.conf" in text for text in rendered.values())
    assert (
        "dist/"
        in subprocess.run(
            # With the slash: `/dist/` ignores a directory, and a clean checkout has none yet.
            ["git", "check-ignore", "dist/"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout
    )

    tools = {"UV_TOOL_DIR": str(tmp_path / "tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "bin")}
    installed = subprocess.run(
        ["uv", "tool", "install", "--find-links", str(dist), "-c", str(dist / "constraints.txt"),
         str(dist / f"hostaffinity_cli-{VERSION}-py3-none-any.whl")],
        env={**environment, **tools}, capture_output=True, text=True,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    answered = subprocess.run(
        [str(tmp_path / "bin" / "hostaffinity"), "--version"], capture_output=True, text=True
    )
    assert (answered.returncode, answered.stdout) == (0, f"hostaffinity {VERSION}\n")

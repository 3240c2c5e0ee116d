"""One release version everywhere, and `make release` as an operator would use what it writes:
from a fresh checkout, versioned manifests per variant, the Helm chart, and one CLI wheel that a
plain `pip install` (or `uv tool install`) into an empty environment turns into a
`hostaffinity` answering `--version`."""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import helm_python as helm
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from hostaffinity.cli.main import main
from hostaffinity.schema.version import release_version
from scripts.manifests import load_all, render
from scripts.release import (
    VARIANTS,
    disagreements,
    our_images,
    variant_documents,
    workspace_version,
)

ROOT = Path(__file__).resolve().parents[1]
SERVICES = sorted(p.parent.name for p in (ROOT / "services").glob("*/pyproject.toml"))
VERSION = workspace_version()
CLI_WHEEL = f"hostaffinity_cli-{VERSION}-py3-none-any.whl"


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


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dist/ of `make release` run in a fresh checkout of this tree (once for this module)."""
    checkout = fresh_checkout(tmp_path_factory.mktemp("release") / "hostaffinity")
    made = subprocess.run(
        ["make", "release"], cwd=checkout, env=without_tool_settings(), capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    return checkout / "dist"


def without_tool_settings(**added: str) -> dict[str, str]:
    """This environment without what steers uv, pip or a virtualenv (the network's CA trust
    stays), as on an operator's machine: pip reads no config file, so only PyPI is asked."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("UV_", "PIP_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    return {**kept, "PIP_CONFIG_FILE": os.devnull, **added}


@pytest.mark.timeout(900)
def test_a_fresh_checkout_releases_manifests_and_the_chart(released: Path) -> None:
    dist = released
    for variant, components in VARIANTS.items():
        documents = load_all(dist / f"hostaffinity-{VERSION}-{variant}.yaml")
        assert documents[0]["kind"] == "Namespace", variant
        assert {(d["kind"], d["metadata"]["name"]) for d in documents} == {
            (d["kind"], d["metadata"]["name"]) for d in variant_documents(components)
        }, variant
        assert {i.rpartition(":")[2] for i in our_images(documents)} == {VERSION}, variant
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


@pytest.mark.timeout(900)
def test_the_release_s_one_cli_wheel_carries_our_libraries_and_names_none_of_them(
    released: Path,
) -> None:
    """Nothing the CLI needs can be shadowed by a package of the same name on PyPI: the
    wheel carries schema, affinity and runtime itself and asks an index only for third-party
    dependencies, each in a range the tested lock satisfies."""
    assert sorted(p.name for p in released.glob("*.whl")) == [CLI_WHEEL]
    with zipfile.ZipFile(released / CLI_WHEEL) as wheel:
        carried = set(wheel.namelist())
        metadata = email.parser.Parser().parsestr(
            wheel.read(f"hostaffinity_cli-{VERSION}.dist-info/METADATA").decode()
        )
    sources = subprocess.run(
        ["git", "ls-files", "libs/*/src/*.py"], cwd=ROOT, check=True, capture_output=True,
        text=True,
    ).stdout.split()  # fmt: skip
    modules = {source.split("/src/", 1)[1] for source in sources}
    assert {m.split("/")[1] for m in modules} == {"schema", "affinity", "runtime", "cli"}
    assert modules <= carried, sorted(modules - carried)
    required = [Requirement(text) for text in metadata.get_all("Requires-Dist") or []]
    assert required
    locked = {
        package["name"]: package["version"]
        for package in tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))["package"]
        if "version" in package
    }
    for requirement in required:
        name = canonicalize_name(requirement.name)
        assert not name.startswith("hostaffinity"), requirement
        assert requirement.marker is None or requirement.marker.evaluate(), requirement
        assert name in locked, f"{requirement}: not in uv.lock"
        assert requirement.specifier.contains(locked[name]), f"{requirement}: lock {locked[name]}"
    assert [line for line in (released / "constraints.txt").read_text().splitlines()
            if line.startswith("hostaffinity")] == []  # fmt: skip


@pytest.mark.timeout(900)
def test_a_plain_pip_install_of_the_released_wheel_gives_a_working_hostaffinity(
    released: Path, tmp_path: Path
) -> None:
    """As an operator installs it: an empty venv, `pip install <wheel>` with no other flag and
    PyPI as the only index, then `hostaffinity --version`; and `uv tool install <wheel>`."""
    environment = without_tool_settings()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=environment)
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-input", str(released / CLI_WHEEL)],
        env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    answered = subprocess.run(
        [str(venv / "bin" / "hostaffinity"), "--version"], capture_output=True, text=True
    )
    assert (answered.returncode, answered.stdout) == (0, f"hostaffinity {VERSION}\n")

    tools = without_tool_settings(
        UV_TOOL_DIR=str(tmp_path / "tools"), UV_TOOL_BIN_DIR=str(tmp_path / "bin")
    )
    installed = subprocess.run(
        ["uv", "tool", "install", str(released / CLI_WHEEL)],
        env=tools, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    answered = subprocess.run(
        [str(tmp_path / "bin" / "hostaffinity"), "--version"], capture_output=True, text=True
    )
    assert (answered.returncode, answered.stdout) == (0, f"hostaffinity {VERSION}\n")

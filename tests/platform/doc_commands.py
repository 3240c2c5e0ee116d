"""The command blocks of a docs page, read from the markdown itself, and a shell that runs them
as an operator would: bash, in a folder of its own, with the real kubectl (pointed at the
Kubernetes double), a `helm` that renders with Helm's engine and applies what it renders in
Helm's order (tests/platform/helm_install.py), the `hostaffinity` CLI and the services of this
environment, curl, unzip and openssl.

What a test changes in a block before running it is only what names the site: the page's
placeholders (`vcenter.example.com`, `password='...'`) become the test's vCenter simulator and
values (`Substitutions`). kubectl's `apply` gets `--validate=false`: its client-side validation
downloads the server's OpenAPI documents, which the double does not serve (every object is held
to the published schemas by tests/test_deploy_manifests.py instead).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.platform.kubectl import kubectl_binary

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
SHELL_LANGUAGES = {"", "bash", "sh", "shell"}
# What the page's commands call besides kubectl, helm and our own programs.
SYSTEM_TOOLS = ("bash", "cp", "cat", "curl", "unzip", "openssl", "base64", "mkdir", "ls")


@dataclass(frozen=True)
class Block:
    """One fenced block: the page, the heading above it, its language and its text."""

    page: str
    heading: str
    lang: str
    text: str

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL_LANGUAGES


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a markdown page, in order (an indented fence, inside a list item,
    included, its indentation removed)."""
    found: list[Block] = []
    heading = ""
    lines = page.read_text(encoding="utf-8").splitlines()
    at = 0
    while at < len(lines):
        line = lines[at]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        opened = FENCE.match(line)
        if opened is None:
            at += 1
            continue
        indent = len(opened["indent"])
        body: list[str] = []
        at += 1
        while not lines[at].strip().startswith("```"):
            body.append(lines[at][indent:])
            at += 1
        found.append(Block(page.name, heading, opened["lang"], "\n".join(body) + "\n"))
        at += 1
    return found


def block(page: Path, containing: str, lang: str | None = None) -> Block:
    """The one block of the page whose text holds `containing` (a test names a block by what
    it does, never by restating it); none or several fail the test, naming the page."""
    matching = [
        b for b in blocks(page) if containing in b.text and (lang is None or b.lang == lang)
    ]
    if len(matching) != 1:
        raise AssertionError(
            f"{page.name}: {len(matching)} blocks hold {containing!r}; expected exactly one"
        )
    return matching[0]


def command_lines(text: str) -> list[str]:
    """The commands of a block: continuation lines joined, blank lines and `$ ` prompts'
    output left out (a block showing a session keeps only its `$ ` lines)."""
    joined = re.sub(r"\\\n\s*", "", text)
    lines = [line for line in joined.splitlines() if line.strip()]
    if any(line.startswith("$ ") for line in lines):
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    return lines


@dataclass
class Substitutions:
    """The page's placeholders and what the test puts in their place, longest first."""

    values: dict[str, str] = field(default_factory=dict)

    def apply(self, text: str) -> str:
        for placeholder in sorted(self.values, key=len, reverse=True):
            text = text.replace(placeholder, self.values[placeholder])
        return text


def _kubectl_wrapper(bin_dir: Path) -> None:
    """`kubectl` on the shell's PATH: the real one, `apply` run with --validate=false."""
    script = bin_dir / "kubectl"
    script.write_text(
        "#!/bin/bash\n"
        "args=()\nadded=\n"
        'for arg in "$@"; do args+=("$arg")\n'
        '  if [ -z "$added" ] && [ "$arg" = apply ]; then args+=(--validate=false); added=1; fi\n'
        "done\n"
        f'exec {kubectl_binary()} "${{args[@]}}"\n',
        encoding="utf-8",
    )
    script.chmod(0o755)


def _helm_wrapper(bin_dir: Path) -> None:
    """`helm` on the shell's PATH: tests/platform/helm_install.py in this environment."""
    script = bin_dir / "helm"
    script.write_text(
        f'#!/bin/bash\ncd "$PWD" && PYTHONPATH={ROOT} exec {sys.executable} '
        '-m tests.platform.helm_install "$@"\n',
        encoding="utf-8",
    )
    script.chmod(0o755)


@dataclass
class Shell:
    """bash in `workdir`, its kubectl on the cluster of `kubeconfig`."""

    workdir: Path
    kubeconfig: Path
    substitutions: Substitutions = field(default_factory=Substitutions)
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [tool for tool in SYSTEM_TOOLS if shutil.which(tool) is None]
        if missing:
            raise FileNotFoundError(f"the docs' commands need {missing} (Debian packages)")
        self.bin = self.workdir.parent / f"{self.workdir.name}-bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        _kubectl_wrapper(self.bin)
        _helm_wrapper(self.bin)

    def environment(self) -> dict[str, str]:
        path = os.pathsep.join(
            [str(self.bin), str(Path(sys.executable).parent), "/usr/bin", "/bin"]
        )
        return {
            "PATH": path,
            "HOME": str(self.workdir.parent / f"{self.workdir.name}-home"),
            "KUBECONFIG": str(self.kubeconfig),
            **self.extra_env,
        }

    async def run(self, text: str, *, stdin: str = "") -> subprocess.CompletedProcess[str]:
        """A block's commands, placeholders substituted, stopping at the first that fails; off
        the event loop, which may serve the double they talk to."""
        script = "set -euo pipefail\n" + "\n".join(
            self.substitutions.apply(line) for line in command_lines(text)
        )
        return await asyncio.to_thread(
            subprocess.run,
            ["bash", "-c", script],
            cwd=self.workdir,
            env=self.environment(),
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )

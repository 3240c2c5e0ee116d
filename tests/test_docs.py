"""docs/: the generated reference pages match the code; a page that does not is reported."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import yaml

from hostaffinity.node_labeller.config import NodeLabellerConfig
from hostaffinity.runtime.process.config import ConfigError, load_config
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from hostaffinity.runtime.vcenter.trust import check_ca_file

REPO = Path(__file__).resolve().parents[1]


def check(docs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/docs_reference.py", "--check", "--docs", str(docs)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_generated_reference_pages_are_current() -> None:
    """docs/configuration.md and docs/events.md are what scripts/docs_reference.py makes now."""
    checked = check(REPO / "docs")
    assert checked.returncode == 0, checked.stderr


def test_a_page_that_differs_from_the_code_is_stale(tmp_path: Path) -> None:
    docs = shutil.copytree(REPO / "docs", tmp_path / "docs")
    page = docs / "configuration.md"
    page.write_text(page.read_text().replace("`drain_seconds`", "`drain_secs`"), encoding="utf-8")
    checked = check(docs)
    assert checked.returncode == 1
    assert "configuration.md" in checked.stderr
    assert "events.md" not in checked.stderr


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` as scripts/test.sh runs it (warnings are logged, and counted)."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_docs_build_has_no_warning(tmp_path: Path) -> None:
    built = mkdocs_build(REPO / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr


def test_a_warning_fails_the_docs_build(tmp_path: Path) -> None:
    """A link to a heading that is not there is a warning, and --strict makes it fatal."""
    docs = shutil.copytree(REPO / "docs", tmp_path / "docs")
    page = docs / "cli.md"
    page.write_text(page.read_text() + "\n[gone](install.md#no-such-heading)\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        (REPO / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}"),
        encoding="utf-8",
    )
    built = mkdocs_build(config, tmp_path / "site")
    assert built.returncode == 1
    assert "#no-such-heading" in built.stderr


def test_the_test_script_builds_the_docs_so_that_a_warning_fails() -> None:
    """`--quiet` would keep warnings from being logged, so `--strict` would never count them."""
    script = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    (line,) = [line for line in script.splitlines() if "mkdocs build" in line]
    assert "--strict" in line.split()
    assert not {"--quiet", "-q"} & set(line.split())


# A vCenter setting as the docs name it: `vcenters[0].ca_file`, `vcenters[i].thumbprint`, or the
# one-vCenter layout's `vcenter.ca_file` that the config loader refuses.
VCENTER_KEY = re.compile(r"\b(vcenters?(?:\[[^\]]*\])?\.[a-z_]+)\b")
ITEM_KEY = re.compile(r"vcenters\[(?:\d*|i|name=[^\]]+)\]\.([a-z_]+)")
# Pages that show the old layout on purpose (the upgrade table, the changelog).
OLD_LAYOUT_PAGES = {"upgrade.md", "changelog.md"}


def test_the_docs_name_vcenter_settings_by_the_keys_the_code_reads() -> None:
    fields = {field.name for field in msgspec.structs.fields(VCenterSettings)}
    wrong = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        if page.name in OLD_LAYOUT_PAGES:
            continue
        for code in re.findall(r"`([^`]+)`", page.read_text(encoding="utf-8")):
            for key in VCENTER_KEY.findall(code):
                if key.rpartition(".")[2] not in fields:
                    continue  # vcenter.env, the chart's vcenter.secret, vcenter.example.com
                if ITEM_KEY.fullmatch(key) is None:
                    wrong.append(f"{page.relative_to(REPO)}: {key}")
    assert wrong == []


def test_the_key_a_trust_message_names_is_one_the_config_takes(tmp_path: Path) -> None:
    """Written as the message says, the setting loads (the old layout's key was refused)."""
    settings = VCenterSettings(host="vc", username="u", password="p", ca_file="/missing/ca.crt")
    with pytest.raises(ConfigError) as raised:
        check_ca_file(settings, "vcenters[0]")
    keys = VCENTER_KEY.findall(str(raised.value))
    assert keys == ["vcenters[0].ca_file", "vcenters[0].thumbprint"]
    for key in keys:
        found = ITEM_KEY.fullmatch(key)
        assert found
        value = str(tmp_path) if found[1] == "ca_file" else "SHA256:" + ":".join(["AB"] * 32)
        config = tmp_path / "node-labeller.yaml"
        item = {"host": "vc", "username": "u", "password": "p", found[1]: value}
        config.write_text(yaml.safe_dump({"vcenters": [item]}), encoding="utf-8")
        loaded = load_config(NodeLabellerConfig, [config], environ={})
        assert getattr(loaded.vcenters[0], found[1]) == value

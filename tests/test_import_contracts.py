"""The config-leaf contract in .importlinter names every module of every service but its config:
import-linter cannot forbid a package's modules to one of its own, so they are listed, and a
module added to a service without being listed here would escape the contract."""

import configparser
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTRACT = "importlinter:contract:config-leaf"


def service_modules(services: Path) -> set[str]:
    """`hostaffinity.<package>.<module or subpackage>` of every service but its config."""
    return {
        f"hostaffinity.{package.name}.{child.name.removesuffix('.py')}"
        for package in services.glob("*/src/hostaffinity/*")
        if package.is_dir()
        for child in package.iterdir()
        if child.name not in {"__init__.py", "config.py", "py.typed", "__pycache__"}
    }


def listed(field: str) -> set[str]:
    parser = configparser.ConfigParser()
    parser.read(REPO / ".importlinter", encoding="utf-8")
    return set(parser[CONTRACT][field].split())


def test_every_service_module_but_config_is_forbidden_to_the_configs() -> None:
    modules = service_modules(REPO / "services")
    assert len(modules) >= 40, "fewer service modules than the five services hold"
    assert modules - listed("forbidden_modules") == set()


def test_every_service_config_is_a_source_of_the_contract() -> None:
    configs = {
        f"hostaffinity.{p.parent.name}.config" for p in REPO.glob("services/*/src/*/*/config.py")
    }
    assert len(configs) == 5
    assert listed("source_modules") == configs


def test_a_module_left_out_is_found(tmp_path: Path) -> None:
    package = tmp_path / "extra" / "src" / "hostaffinity" / "extra"
    package.mkdir(parents=True)
    for name in ("__init__.py", "config.py", "feeds.py"):
        (package / name).write_text("", encoding="utf-8")
    assert service_modules(tmp_path) == {"hostaffinity.extra.feeds"}

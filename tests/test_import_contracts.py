"""Each service's config.py is a leaf: it imports no other module of its service, so the core
and the shell can both take their settings from it. import-linter cannot forbid a package's
modules to one of its own modules, so this reads the import graph itself (.importlinter's
config-leaf contract keeps the I/O clients out)."""

from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]


def configs() -> list[str]:
    found = sorted(
        f"hostaffinity.{path.parent.name}.config"
        for path in REPO.glob("services/*/src/hostaffinity/*/config.py")
    )
    assert len(found) == 5, found
    return found


def own_imports(graph: grimp.ImportGraph, config: str) -> list[str]:
    """The modules of `config`'s own service that it imports, directly or through others."""
    service = config.removesuffix(".config")
    reached = graph.find_upstream_modules(config)
    return sorted(m for m in reached if m.startswith(service + ".") and m != config)


def test_no_service_config_imports_its_own_service() -> None:
    graph = grimp.build_graph("hostaffinity")
    assert {config: own_imports(graph, config) for config in configs()} == {
        config: [] for config in configs()
    }


def test_a_config_that_imports_its_core_is_found() -> None:
    graph = grimp.ImportGraph()
    for module in ("x.svc.config", "x.svc.core", "x.svc.core.model", "x.lib"):
        graph.add_module(module)
    graph.add_import(importer="x.svc.config", imported="x.lib")
    graph.add_import(importer="x.lib", imported="x.svc.core.model")
    assert own_imports(graph, "x.svc.config") == ["x.svc.core.model"]

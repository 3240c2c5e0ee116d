"""docs/cores.md, the drawing of each service's core and shell, is what the imports make now,
and the drawing's own check finds a core that imports an I/O client."""

import subprocess
import sys
from pathlib import Path

import grimp

from scripts.draw_cores import SERVICES, build_graph, draw

REPO = Path(__file__).resolve().parents[1]


def test_the_page_is_what_the_imports_draw_now() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/draw_cores.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_core_is_drawn_with_no_arrow_to_io() -> None:
    graph = build_graph()
    for service in SERVICES:
        drawing = draw(graph, service)
        assert drawing.boxes["core"] == "core"
        assert drawing.core_modules, f"{service} has no core modules"
        assert drawing.core_reaches_io() == []
        assert any(kind == "io" for kind in drawing.boxes.values()), "its shell does I/O"


def test_a_core_that_imports_nats_is_shown() -> None:
    graph = grimp.ImportGraph()
    for module in (
        "hostaffinity.descheduler",
        "hostaffinity.descheduler.core",
        "hostaffinity.descheduler.core.planner",
        "hostaffinity.descheduler.service",
        "hostaffinity.schema",
    ):
        graph.add_module(module)
    graph.add_module("nats", is_squashed=True)
    graph.add_import(importer="hostaffinity.descheduler.core.planner", imported="nats")
    graph.add_import(
        importer="hostaffinity.descheduler.core.planner", imported="hostaffinity.schema"
    )
    graph.add_import(
        importer="hostaffinity.descheduler.service", imported="hostaffinity.descheduler.core"
    )
    drawing = draw(graph, "descheduler")
    assert drawing.core_modules == ["planner"]
    assert drawing.core_reaches_io() == [("core", "nats")]
    assert ("service", "core") in drawing.arrows
    assert 'core["core: planner"]:::core' in drawing.mermaid()

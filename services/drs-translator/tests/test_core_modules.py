"""The core stays split by concern (issue 43: the planner was one 761-line module): each module
of `drs_translator.core` holds one step of the plan or one kind of value, and none grows past
450 lines, the bound the split was made to (like the plugin folders of kube-scheduler and the
descheduler, where each plugin is a module of its own)."""

from pathlib import Path

import hostaffinity.drs_translator.core as core

_MOST_LINES = 450
_CORE = Path(core.__file__).parent


def test_no_core_module_is_over_the_bound() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in _CORE.glob("*.py")}
    assert "planner.py" in sizes, f"the core was not found at {_CORE}"
    assert {name: n for name, n in sizes.items() if n > _MOST_LINES} == {}


def test_the_planner_composes_one_module_per_concern() -> None:
    concerns = {"vm_graph.py", "cliques.py", "vm_vm_rules.py", "vm_host_rules.py", "naming.py"}
    assert concerns <= {path.name for path in _CORE.glob("*.py")}
    planner = (_CORE / "planner.py").read_text()
    for module in ("vm_graph", "vm_vm_rules", "vm_host_rules"):
        assert f"hostaffinity.drs_translator.core.{module} import" in planner

"""A host's EnterMaintenanceMode task, seen in TaskManager.recentTask, marks the host as entering
maintenance in its `host.<moid>` record while the task is queued or running, not after."""

import pytest

from hostaffinity.node_labeller.core.inventory import ENTER_MAINTENANCE, TASK, ObjectUpdate
from hostaffinity.node_labeller.core.reconcile import reconcile_host
from tests.platform.builders.node_labeller import enter, inventory_with


@pytest.mark.parametrize(
    ("description", "state", "expected"),
    [
        (ENTER_MAINTENANCE, "queued", True),
        (ENTER_MAINTENANCE, "running", True),
        (ENTER_MAINTENANCE, "success", False),
        (ENTER_MAINTENANCE, "error", False),
        ("HostSystem.exitMaintenanceMode", "running", False),
        ("VirtualMachine.powerOn", "running", False),
    ],
)
def test_only_an_unfinished_enter_maintenance_task_marks_its_host(
    description: str, state: str, expected: bool
) -> None:
    inventory = inventory_with()
    task = enter(TASK, "task-9", info__descriptionId=description, info__entity="host-1")
    inventory.apply(ObjectUpdate("enter", TASK, "task-9", {**task.props, "info.state": state}))
    host_1, host_2 = inventory.host("host-1"), inventory.host("host-2")
    assert host_1 is not None
    assert host_2 is not None
    assert (host_1.entering_maintenance, host_2.entering_maintenance) == (expected, False)


def test_the_record_follows_the_task_from_running_to_done_and_gone() -> None:
    inventory = inventory_with()
    before = reconcile_host("host-1", "vc-1", inventory, None, kv_stale=False).put
    assert before is not None
    assert not before.entering_maintenance
    touched = inventory.apply(
        enter(
            TASK,
            "task-9",
            info__descriptionId=ENTER_MAINTENANCE,
            info__entity="host-1",
            info__state="running",
        )
    )
    assert touched == set()  # no VM moved
    assert inventory.host_of_task("task-9") == "host-1"
    running = reconcile_host("host-1", "vc-1", inventory, before, kv_stale=False).put
    assert running is not None
    assert running.entering_maintenance
    assert not running.in_maintenance_mode
    inventory.apply(ObjectUpdate("modify", TASK, "task-9", {"info.state": "success"}))
    inventory.apply(
        ObjectUpdate("modify", "HostSystem", "host-1", {"runtime.inMaintenanceMode": True})
    )
    done = reconcile_host("host-1", "vc-1", inventory, running, kv_stale=False).put
    assert done is not None
    assert (done.entering_maintenance, done.in_maintenance_mode) == (False, True)
    inventory.apply(ObjectUpdate("leave", TASK, "task-9"))
    assert inventory.host_of_task("task-9") is None


def test_a_host_stays_entering_while_any_of_its_tasks_runs() -> None:
    """A retried EnterMaintenanceMode leaves an old task in recentTask beside the new one; the
    host is entering until the last unfinished one ends or leaves."""
    inventory = inventory_with()
    for task in ("task-1", "task-2"):
        inventory.apply(
            enter(
                TASK,
                task,
                info__descriptionId=ENTER_MAINTENANCE,
                info__entity="host-1",
                info__state="running",
            )
        )

    def entering() -> bool:
        host = inventory.host("host-1")
        assert host is not None
        return host.entering_maintenance

    inventory.apply(ObjectUpdate("modify", TASK, "task-1", {"info.state": "error"}))
    assert entering()
    inventory.apply(ObjectUpdate("leave", TASK, "task-2"))
    assert not entering()

"""proto/ against the last release's copy (proto/releases/<version>/): a subscriber built with
that release keeps working. Each rule is also shown failing, on a changed copy in tmp_path (never
on the real schemas)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hostaffinity.schema.compatibility import breaking_changes

PROTO = Path(__file__).resolve().parents[3] / "proto"


def last_release() -> Path:
    releases = [path for path in (PROTO / "releases").iterdir() if path.is_dir()]
    return max(releases, key=lambda path: tuple(int(part) for part in path.name.split(".")))


def test_proto_keeps_every_promise_of_the_last_release() -> None:
    problems = breaking_changes(last_release(), PROTO)
    assert not problems, "\n".join(problems)


def _edit(proto: Path, message: str, change: Callable[[dict[str, Any]], None]) -> None:
    path = proto / "schemas" / f"{message}.json"
    document = json.loads(path.read_text())
    change(document["$defs"][message])
    path.write_text(json.dumps(document))


def remove_field(definition: dict[str, Any]) -> None:
    del definition["properties"]["to_host_name"]
    definition["required"].remove("to_host_name")


def change_type(definition: dict[str, Any]) -> None:
    definition["properties"]["version"] = {"type": "string"}


def require_new_field(definition: dict[str, Any]) -> None:
    definition["properties"]["datacenter"] = {"type": "string"}
    definition["required"].append("datacenter")


def add_optional_field(definition: dict[str, Any]) -> None:
    definition["properties"]["datacenter"] = {"type": "string", "default": ""}


def reword(definition: dict[str, Any]) -> None:
    definition["description"] = "Reworded."
    definition["properties"]["node"]["description"] = "The Kubernetes node."


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (remove_field, ["VmMoved/VmMoved.to_host_name: field removed"]),
        (
            change_type,
            [
                "VmMoved/VmMoved.version: schema changed from {'type': 'integer'} "
                "to {'type': 'string'}"
            ],
        ),
        (require_new_field, ["VmMoved/VmMoved.datacenter: newly required"]),
        (add_optional_field, []),
        (reword, []),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_changed_message_is_judged_as_its_old_subscribers_see_it(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], expected: list[str]
) -> None:
    changed = tmp_path / "proto"
    shutil.copytree(last_release(), changed)
    _edit(changed, "VmMoved", change)
    assert breaking_changes(last_release(), changed) == expected


def test_a_removed_event_type_breaks_its_subscribers(tmp_path: Path) -> None:
    changed = tmp_path / "proto"
    shutil.copytree(last_release(), changed)
    (changed / "schemas" / "PodEvicted.json").unlink()
    asyncapi = json.loads((changed / "asyncapi.json").read_text())
    asyncapi["channels"] = {
        key: channel
        for key, channel in asyncapi["channels"].items()
        if channel["address"] != "hostaffinity.events.pod.evicted"
    }
    (changed / "asyncapi.json").write_text(json.dumps(asyncapi))
    assert breaking_changes(last_release(), changed) == [
        "channel hostaffinity.events.pod.evicted: removed (an event type is never removed)",
        "PodEvicted: message removed",
    ]

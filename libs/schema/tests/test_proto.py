"""proto/ is generated from the schema library; this fails while it is stale (run `make proto`)."""

import json
from pathlib import Path

from hostaffinity.schema.events import EVENT_TYPES
from hostaffinity.schema.proto import generated_files

PROTO = Path(__file__).resolve().parents[3] / "proto"
RELEASES = "releases"


def test_proto_directory_matches_the_schema() -> None:
    expected = generated_files()
    on_disk = {
        str(path.relative_to(PROTO)): path.read_text(encoding="utf-8")
        for path in PROTO.rglob("*.json")
        if path.relative_to(PROTO).parts[0] != RELEASES  # past releases' copies, kept as they were
    }
    stale = sorted(name for name in expected if on_disk.get(name) != expected[name])
    extra = sorted(set(on_disk) - set(expected))
    assert not stale, f"proto/ is stale, run `make proto`: {stale}"
    assert not extra, f"proto/ holds files the schema no longer generates: {extra}"


def test_asyncapi_names_a_channel_for_every_event_type() -> None:
    document = json.loads(generated_files()["asyncapi.json"])
    addresses = {channel["address"] for channel in document["channels"].values()}
    assert {f"hostaffinity.events.{kind}" for kind in EVENT_TYPES} <= addresses
    assert "hostaffinity.dlq.{service}" in addresses

"""Generates `proto/`: a JSON Schema per message and an AsyncAPI document of the channels.

Run `make proto` after changing the schema; a test fails while proto/ is stale, so outside
subscribers always read the contract the code really speaks.
"""

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from hostaffinity.schema.drs import ClusterHaSettings, DrsClusterReport, DrsOwnership
from hostaffinity.schema.events import EVENT_MESSAGES, event_type_of
from hostaffinity.schema.fleet import WorkloadPlacement
from hostaffinity.schema.fleet_rules import FleetRuleLease
from hostaffinity.schema.names import (
    DLQ_STREAM,
    DRS_BUCKET,
    EVENTS_STREAM,
    TOPOLOGY_BUCKET,
    dlq_subject,
    event_subject,
)
from hostaffinity.schema.reports import (
    ExposureReport,
    HostFailureReport,
    MaintenanceReport,
    NodeExplanation,
    PodExplanation,
    StatusReport,
    TopologyReport,
)
from hostaffinity.schema.topology import DeadLetter, EsxiHost, NodePlacement
from hostaffinity.schema.version import SCHEMA_VERSION

VALUE_MESSAGES: tuple[type[msgspec.Struct], ...] = (
    NodePlacement,
    EsxiHost,
    DeadLetter,
    DrsOwnership,
    ClusterHaSettings,
    DrsClusterReport,
    WorkloadPlacement,
    FleetRuleLease,
)
# What the `hostaffinity` command prints with `-o json`.
CLI_REPORTS: tuple[type[msgspec.Struct], ...] = (
    TopologyReport,
    ExposureReport,
    MaintenanceReport,
    HostFailureReport,
    PodExplanation,
    NodeExplanation,
    StatusReport,
)


def generated_files() -> dict[str, str]:
    """Relative path under proto/ → file text, for every generated file."""
    files: dict[str, str] = {}
    for message in (*EVENT_MESSAGES, *VALUE_MESSAGES, *CLI_REPORTS):
        files[f"schemas/{message.__name__}.json"] = _dump(_json_schema(message))
    files["asyncapi.json"] = _dump(_asyncapi())
    return files


def write(directory: Path) -> None:
    """Replace the generated files in `directory`."""
    for relative, text in generated_files().items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _json_schema(message: type[msgspec.Struct]) -> dict[str, Any]:
    (ref,), components = msgspec.json.schema_components([message], ref_template="#/$defs/{name}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://hostaffinity.io/schema/v{SCHEMA_VERSION}/{message.__name__}.json",
        **ref,
        "$defs": components,
    }


def _asyncapi() -> dict[str, Any]:
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for message in EVENT_MESSAGES:
        name = message.__name__
        channel = event_type_of(message).replace(".", "-")
        messages[name] = {
            "name": name,
            "contentType": "application/json",
            "headers": {
                "type": "object",
                "properties": {
                    "Nats-Msg-Id": {"type": "string", "description": "equals the event id"},
                    "traceparent": {"type": "string", "description": "W3C trace context"},
                },
            },
            "payload": {"$ref": f"schemas/{name}.json"},
        }
        channels[channel] = {
            "address": event_subject(event_type_of(message)),
            "description": f"Stream {EVENTS_STREAM}: {(message.__doc__ or '').strip()}",
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
        }
        operations[f"receive-{channel}"] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{channel}"},
        }
    messages["DeadLetter"] = {
        "name": "DeadLetter",
        "contentType": "application/json",
        "payload": {"$ref": "schemas/DeadLetter.json"},
    }
    channels["dlq"] = {
        "address": dlq_subject("{service}"),
        "description": f"Stream {DLQ_STREAM}: messages a service could not decode.",
        "parameters": {"service": {"description": "the service that rejected the message"}},
        "messages": {"DeadLetter": {"$ref": "#/components/messages/DeadLetter"}},
    }
    operations["receive-dlq"] = {"action": "receive", "channel": {"$ref": "#/channels/dlq"}}
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "hostaffinity events",
            "version": str(SCHEMA_VERSION),
            "description": (
                "Topology and placement events. The current topology is the JetStream KV bucket "
                f"{TOPOLOGY_BUCKET}: node.<node-name> holds a NodePlacement, host.<host-moid> "
                "an EsxiHost (schemas/NodePlacement.json, schemas/EsxiHost.json). The KV "
                f"bucket {DRS_BUCKET} holds rule.<vcenter>.<cluster-moid>.<name> → a "
                "DrsOwnership (schemas/DrsOwnership.json) for every DRS rule or group the "
                "drs-translator created, ha.<vcenter>.<cluster-moid> → a ClusterHaSettings "
                "(schemas/ClusterHaSettings.json): vSphere HA of each cluster holding such rules, "
                "and report.<vcenter>.<cluster-moid> → a DrsClusterReport "
                "(schemas/DrsClusterReport.json): what needs attention in that cluster (groups "
                "vCenter does not hold, other installs' rules on the same hosts)."
            ),
        },
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
    }


def _dump(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "proto"))

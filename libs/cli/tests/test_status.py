"""`hostaffinity status` from its inputs (pure): a leader's readiness as its Lease carries it, and
held rules named apart across vCenters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hostaffinity.cli.leases import Lease, LeaseMetadata, LeaseSpec
from hostaffinity.cli.status import render_status, status_report
from hostaffinity.schema import DrsOwnership
from hostaffinity.schema.names import ANNOTATION_READINESS
from hostaffinity.schema.readiness import ReadinessPart, ServiceReadiness, encode_readiness

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _lease(holder: str, annotations: dict[str, str] | None = None) -> Lease:
    renewed = (NOW - timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
    return Lease(
        spec=LeaseSpec(
            holder_identity=holder,
            acquire_time=renewed,
            renew_time=renewed,
            lease_duration_seconds=15,
        ),
        metadata=LeaseMetadata(annotations=annotations or {}),
    )


def _leases(labeller: Lease) -> dict[str, Lease | None]:
    return {
        "node-labeller": labeller,
        "drs-translator": _lease("drs-1"),
        "descheduler": _lease("desch-1"),
    }


def test_a_degraded_leader_is_ready_and_named_under_needs_attention() -> None:
    away = ReadinessPart(
        name="vcenter connected: vc-b", state="degraded", detail="away since T: refused"
    )
    written = encode_readiness(ServiceReadiness(ready=True, parts=[away], at="T"))
    report = status_report(NOW, _leases(_lease("nl-1", {ANNOTATION_READINESS: written})), [], 0, [])
    labeller = report.services[0]
    assert (labeller.readiness, labeller.readiness_parts) == ("degraded", [away])
    assert report.problems == [
        "node-labeller: vcenter connected: vc-b is degraded (away since T: refused); it serves "
        "the other vCenters"
    ]
    assert [s.readiness for s in report.services] == ["degraded", "", "", "", ""]
    (row,) = [line for line in render_status(report).splitlines() if line.startswith("node-")]
    assert "degraded" in row


def test_a_not_ready_leader_and_an_unreadable_annotation_are_problems() -> None:
    failing = ReadinessPart(name="labelling done", state="fails")
    written = encode_readiness(ServiceReadiness(ready=False, parts=[failing]))
    report = status_report(NOW, _leases(_lease("nl-1", {ANNOTATION_READINESS: written})), [], 0, [])
    assert report.services[0].readiness == "not ready"
    assert report.problems == ["node-labeller's leader is not ready: labelling done"]
    garbled = _lease("nl-1", {ANNOTATION_READINESS: "{not json"})
    (problem,) = status_report(NOW, _leases(garbled), [], 0, []).problems
    assert problem.startswith(
        "node-labeller's leader is not ready: readiness (annotation hostaffinity.io/readiness "
        "unreadable: "
    )


def test_held_rules_name_their_vcenter_when_the_records_span_several() -> None:
    records = [
        DrsOwnership(
            vcenter=vcenter,
            cluster_moid="domain-c7",
            name="hostaffinity-web",
            kind="vm-anti-affinity",
            vms=["vm-1"],
            pods=["default/web-1"],
            state="applied",
            held_because="host-21 is entering maintenance mode",
        )
        for vcenter in ("vc-a", "vc-b")
    ]
    report = status_report(NOW, _leases(_lease("nl-1")), [], 0, [], drs_records=records)
    assert report.held_rules == [
        "hostaffinity-web in cluster vc-a/domain-c7: host-21 is entering maintenance mode",
        "hostaffinity-web in cluster vc-b/domain-c7: host-21 is entering maintenance mode",
    ]
    one = status_report(NOW, _leases(_lease("nl-1")), [], 0, [], drs_records=records[:1])
    assert one.held_rules == [
        "hostaffinity-web in cluster domain-c7: host-21 is entering maintenance mode"
    ]

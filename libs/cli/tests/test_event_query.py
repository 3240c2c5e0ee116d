"""`hostaffinity events`: what it asks the stream for, and how a row reads (pure, no bus)."""

from __future__ import annotations

import datetime

import msgspec
import pytest

from hostaffinity.cli.event_query import EventQuery, parse_since, table_header, table_row
from hostaffinity.schema import EVENT_TYPES, EVENTS_SUBJECT_PREFIX, PodEvicted
from tests.platform.bus_values import vm_moved

NOW = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.UTC)

MOVED = vm_moved("worker-1", "esx-a.lab", "esx-b.lab", at="2026-11-25T11:59:00.123Z", version=4)
EVICTED = PodEvicted(
    id="e1",
    occurred_at="2026-11-25T11:59:30Z",
    source="descheduler",
    pod="shop/web-1",
    pod_uid="uid-1",
    node="worker-1",
    strategy="RemovePodsViolatingInterPodAntiAffinity",
    rule="apart from app=web on hostaffinity.io/esxi-host",
    result="evicted",
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("90s", NOW - datetime.timedelta(seconds=90), id="seconds"),
        pytest.param("15m", NOW - datetime.timedelta(minutes=15), id="minutes"),
        pytest.param("1.5h", NOW - datetime.timedelta(minutes=90), id="fractional-hours"),
        pytest.param("7d", NOW - datetime.timedelta(days=7), id="days"),
        pytest.param("1w", NOW - datetime.timedelta(weeks=1), id="weeks"),
        pytest.param(
            "2026-11-25T10:00:00Z",
            datetime.datetime(2026, 11, 25, 10, tzinfo=datetime.UTC),
            id="iso-utc",
        ),
        pytest.param(
            "2026-11-25T10:00:00",
            datetime.datetime(2026, 11, 25, 10, tzinfo=datetime.UTC),
            id="iso-without-zone-is-utc",
        ),
        pytest.param(
            "2026-11-25T12:00:00+02:00",
            datetime.datetime(2026, 11, 25, 10, tzinfo=datetime.UTC),
            id="iso-with-offset",
        ),
    ],
)
def test_since_reads_a_duration_or_a_time(text: str, expected: datetime.datetime) -> None:
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "15", "5y", "-1h"])
def test_since_that_is_neither_says_what_it_takes(text: str) -> None:
    with pytest.raises(ValueError, match=r"give a duration \(90s, 15m, 2h, 7d, 1w\) or a time"):
        parse_since(text, NOW)


def test_an_unknown_type_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown event types vm\.teleported; the types are "):
        EventQuery(types=("vm.moved", "vm.teleported"))


def test_a_pod_must_be_namespace_slash_name() -> None:
    with pytest.raises(ValueError, match=r"--pod 'web-1': give NAMESPACE/NAME"):
        EventQuery(pod="web-1")


def test_no_filter_reads_every_subject_with_one_wildcard() -> None:
    query = EventQuery()
    assert query.event_types() == EVENT_TYPES
    assert query.subjects() == [f"{EVENTS_SUBJECT_PREFIX}.>"]


def test_asked_types_become_one_subject_each() -> None:
    query = EventQuery(types=("pod.evicted", "vm.moved"))
    assert query.subjects() == [
        f"{EVENTS_SUBJECT_PREFIX}.pod.evicted",
        f"{EVENTS_SUBJECT_PREFIX}.vm.moved",
    ]


def test_an_object_filter_narrows_the_types_to_those_that_can_name_it() -> None:
    by_host = EventQuery(host="esx-a.lab").event_types()
    assert "vm.moved" in by_host
    assert "pod.evicted" not in by_host
    by_pod = EventQuery(types=("vm.moved", "pod.evicted"), pod="shop/web-1").event_types()
    assert by_pod == ("pod.evicted",)


@pytest.mark.parametrize(
    ("query", "moved", "evicted"),
    [
        pytest.param(EventQuery(), True, True, id="no-filter"),
        pytest.param(EventQuery(node="worker-1"), True, True, id="node-both"),
        pytest.param(EventQuery(node="worker-2"), False, False, id="node-neither"),
        pytest.param(EventQuery(host="esx-b.lab"), True, False, id="host-destination"),
        pytest.param(EventQuery(host="esx-a.lab"), True, False, id="host-origin"),
        pytest.param(EventQuery(pod="shop/web-1"), False, True, id="pod"),
        pytest.param(EventQuery(pod="shop/web-1", node="worker-2"), False, False, id="all-of"),
    ],
)
def test_an_event_matches_when_it_names_every_object_asked_for(
    query: EventQuery, moved: bool, evicted: bool
) -> None:
    assert (query.matches(MOVED), query.matches(EVICTED)) == (moved, evicted)


def test_a_host_may_be_named_with_its_vcenter_as_the_commands_print_it() -> None:
    moved = msgspec.structs.replace(MOVED, vcenter="vc-a")
    assert EventQuery(host="vc-a/esx-b.lab").matches(moved)
    assert not EventQuery(host="vc-b/esx-b.lab").matches(moved)
    assert EventQuery(host="esx-b.lab").matches(moved)


def test_a_row_reads_when_what_about_which_object_and_the_event_s_own_fields() -> None:
    header, row = table_header(), table_row(MOVED)
    starts = [header.index(column) for column in ("TIME", "TYPE", "OBJECT", "DETAILS")]
    cells = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], len(row)], strict=True)]
    assert cells == [
        "2026-11-25 11:59:00",
        "vm.moved",
        "worker-1",
        "vm_moid=vm-worker-1 from_host_moid=esx-a.lab from_host_name=esx-a.lab "
        "to_host_moid=esx-b.lab to_host_name=esx-b.lab version=4",
    ]


def test_a_long_field_is_cut_to_sixty_characters() -> None:
    row = table_row(msgspec.structs.replace(EVICTED, rule="r" * 100))
    assert f"rule={'r' * 57}..." in row
    assert "r" * 58 not in row

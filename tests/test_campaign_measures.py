"""The campaign's measures, on forged histories and samples (fast): how long each fault kind
took to heal (convergence.py) and the soak's drift rule (drift.py) with its report."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.campaign import convergence, drift
from tests.campaign.convergence import healings
from tests.campaign.drift import Sample, drifts
from tests.campaign.history import Agreement, Fault, History
from tests.campaign.runner import Soak, soak_report
from tests.campaign.soak import process_measures

AGREED = Agreement(0.0, labels=True, kv=True, drs=True, repaired=True)


def probes(until: int, **disagreeing: tuple[float, float]) -> list[Agreement]:
    """One probe a second from 0 to `until`; each named path disagrees within its [from, to)."""
    made = []
    for t in range(until + 1):
        paths = {
            path: not (span[0] <= t < span[1])
            for path, span in disagreeing.items()
            if path in ("labels", "kv", "drs", "repaired")
        }
        made.append(
            Agreement(
                float(t),
                paths.get("labels", True),
                paths.get("kv", True),
                paths.get("drs", True),
                paths.get("repaired", True),
            )
        )
    return made


def test_each_fault_is_timed_per_path_from_its_end_and_tabled_per_kind() -> None:
    history = History()
    history.faults = [
        Fault(5.0, 10.0, "kill-replica", "node-labeller-a"),
        Fault(15.0, 20.0, "kill-replica", "drs-translator-a"),
        Fault(25.0, 30.0, "partition-nats", "descheduler-a"),
    ]
    # Labels come back 2 s after the first fault; DRS 6 s after the second, when the KV had
    # been back for 1 s; a violation stays 12 s after the third.
    history.agreements = probes(60, labels=(8, 12), drs=(20, 26), kv=(18, 21), repaired=(29, 42))

    healed = healings(history)

    first, second, third = healed
    assert (first.agreed, first.repaired, first.slowest_path) == (2.0, 0.0, "labels")
    assert (second.agreed, second.paths["kv"], second.slowest_path) == (6.0, 1.0, "drs")
    assert (third.agreed, third.repaired, third.slowest_path) == (0.0, 12.0, "repair")
    rows = {row.kind: row for row in convergence.by_kind(healed)}
    replica = rows["kill-replica"]
    assert (replica.faults, replica.agreed_p50, replica.agreed_max) == (2, 4.0, 6.0)
    assert replica.slowest.fault.target == "drs-translator-a"
    lines = convergence.table(healed)
    assert "| kill-replica | 2 | 4.0 s | 6.0 s | 0.0 s | 0.0 s | drs (6.0 s) |" in lines
    assert "| partition-nats | 1 | 0.0 s | 0.0 s | 12.0 s | 12.0 s | repair (12.0 s) |" in lines
    assert "agreed within 5 s: 2 of 3 faults; repaired within 10 s: 2 of 3" in lines
    assert lines[-1].startswith("slowest: partition-nats descheduler-a healed at 30.0 s")


def test_paths_that_came_back_in_the_same_probe_are_named_together() -> None:
    history = History()
    history.faults = [Fault(5.0, 10.0, "kill-nats", "b-nats")]
    history.agreements = probes(20, labels=(0, 13), kv=(0, 13), drs=(0, 12))

    (healed,) = healings(history)

    assert healed.slowest_path == "labels=kv"


def test_a_vcsim_restart_counts_once_and_waits_for_every_install_it_hit() -> None:
    restart = Fault(5.0, 10.0, "restart-vcsim", "")
    first, second = History(name="a"), History(name="b")
    first.others = [second]
    first.faults = second.faults = [restart]
    first.agreements = probes(30, kv=(10, 12))
    second.agreements = probes(30, labels=(10, 17))

    (healed,) = healings(first)

    assert (healed.agreed, healed.paths["kv"], healed.paths["labels"]) == (7.0, 2.0, 7.0)


def test_a_fault_after_which_a_path_never_agreed_is_marked_open() -> None:
    history = History()
    history.faults = [Fault(5.0, 10.0, "api-held", "api")]
    history.agreements = probes(20, drs=(9, 99))

    (healed,) = healings(history)

    assert healed.open
    assert healed.agreed == 10.0
    assert "| api-held | 1 | 10.0 s | 10.0 s | 0.0 s | 0.0 s | drs (>10.0 s) |" in (
        convergence.table([healed])
    )


def series(subject: str, measure: str, values: list[float], pid: int = 100) -> list[Sample]:
    return [Sample(60.0 * i, subject, pid, measure, v) for i, v in enumerate(values)]


def test_a_measure_rising_at_every_sample_past_the_warm_up_drifts() -> None:
    leaking = series("descheduler-a", "rss MiB", [40, 80, 90, 100, 110, 120])

    (found,) = drifts(leaking, warmup_end=60.0)

    assert (found.subject, found.measure, found.first, found.last) == (
        "descheduler-a",
        "rss MiB",
        80,
        120,
    )


@pytest.mark.parametrize(
    ("values", "warmup_end"),
    [
        pytest.param([40, 80, 90, 90, 90, 90], 60.0, id="grew-then-levelled-off"),
        pytest.param([80, 90, 100, 95, 110, 120], 0.0, id="fell-once"),
        pytest.param([80, 81, 82, 83, 84, 85], 0.0, id="rose-less-than-the-floor"),
        pytest.param([40, 80, 200], 60.0, id="too-few-samples-after-the-warm-up"),
    ],
)
def test_a_bounded_measure_does_not_drift(values: list[float], warmup_end: float) -> None:
    assert drifts(series("nats-0", "rss MiB", values), warmup_end) == []


def test_a_bucket_s_keys_are_judged_and_its_entries_only_shown() -> None:
    """Entries rise while the keys' histories fill (at most keys x revisions per key); keys
    that keep coming (a key per event, deleted after) do not stop."""
    filling = series("bus a", "kv-entries hostaffinity-topology", [20, 40, 60, 80, 100, 120])
    keys = series("bus a", "kv-keys hostaffinity-drs", [4, 20, 40, 60, 80, 100])

    assert [d.measure for d in drifts(filling + keys, warmup_end=0.0)] == [
        "kv-keys hostaffinity-drs"
    ]
    assert (
        "| bus a | kv-entries hostaffinity-topology | 20 | 40 | 60 | 80 | 100 | 120 | shown |"
        in (drift.table(filling, warmup_end=0.0, started=0.0))
    )


def test_a_process_started_again_is_judged_on_its_new_run_only() -> None:
    before = series("node-labeller-a", "fds", [30, 40, 50], pid=100)
    after = series("node-labeller-a", "fds", [0, 0, 0, 20, 21, 21], pid=200)[3:]
    # Over both runs the descriptors rose and fell; the new run is flat.
    assert drifts(before + after, warmup_end=0.0) == []
    growing = series("node-labeller-a", "fds", [0, 0, 0, 20, 30, 40], pid=200)[3:]
    assert [d.measure for d in drifts(before + growing, warmup_end=0.0)] == ["fds"]


def test_the_soak_report_is_a_markdown_table_and_fails_naming_what_drifted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    samples = series("bus a", "consumers KV_hostaffinity-topology", [3, 3, 3, 3]) + series(
        "b-drs-translator-a", "fds", [20, 40, 60, 80]
    )

    status = soak_report(samples, Soak(sample_every_s=60.0, warmup_s=60.0), started=0.0)

    out = capsys.readouterr().out.splitlines()
    assert status == 1
    assert "| process | measure | 0 min* | 1 min | 2 min | 3 min | verdict |" in out
    assert "| b-drs-translator-a | fds | 20 | 40 | 60 | 80 | DRIFTS |" in out
    assert "| bus a | consumers KV_hostaffinity-topology | 3 | 3 | 3 | 3 | bounded |" in out
    assert out[-1] == (
        "soak: DRIFT: b-drs-translator-a fds rose at every sample after the warm-up, "
        "40 to 80 over 3 samples"
    )
    assert soak_report(samples[:4], Soak(60.0, 60.0), started=0.0) == 0


def test_a_process_s_memory_and_descriptors_are_read_from_proc() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        # Until it has exec'd and gone to sleep: right after the exec its pages are not yet
        # touched, and its RSS can read 0.0 MiB (seen once under load).
        stat = Path(f"/proc/{child.pid}/stat")
        while stat.read_text(encoding="utf-8").split(") ")[1][0] != "S" or (
            Path(f"/proc/{child.pid}/comm").read_text(encoding="utf-8").strip() != "sleep"
        ):
            time.sleep(0.01)
        measures = process_measures(child.pid)
        assert measures["fds"] >= 3  # stdin, stdout, stderr
        assert 0 < measures["rss MiB"] < process_measures(os.getpid())["rss MiB"]
    finally:
        child.kill()
        child.wait()
    assert process_measures(child.pid) == {}

"""The soak's verdict on its samples (soak.py): a measure of a process or a bus drifts when,
after the warm-up, it only ever rose and ended well above where it started. Pure: a unit test
forges the samples.

The rule, per series (one process's or bus's measure; a process's samples only since its last
start, a restart beginning a new series): take the samples at or after the warm-up's end; with
at least MIN_JUDGED of them, the series drifts when each is at least the one before, it still
rose over the second half of them (the last above the middle one: a step that then levelled
off is not unbounded), and the last exceeds the first by more than GROWTH of the first and by
more than the measure's floor (FLOORS: an allocator's or a reconnect's step is not a leak). A
series that ever fell, levelled off or rose less is bounded as far as the run can tell; one with
fewer samples is not judged. A bucket's entries are shown, not judged: they are at most its keys
times the revisions a key holds, both judged, and rise while the keys' histories fill. So are a
stream's stored KiB: a stream keeps what it took until its max age.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import Final

MIN_JUDGED: Final = 3
GROWTH: Final = 0.10
# By the measure's kind (its name up to the first space): the least rise that counts.
FLOORS: Final = {
    "rss": 8.0,  # MiB
    "fds": 8.0,
    "consumers": 2.0,
    "kv-revisions/key": 2.0,
    "kv-keys": 16.0,
}
# Measures in the table that the rule does not judge: a stream's stored bytes grow by design
# until its max age (the events stream keeps 7 days), and show what the servers' memory holds.
SHOWN: Final = ("kv-entries", "stream-KiB")


@dataclass(frozen=True)
class Sample:
    """One measure of one process (`pid` > 0) or bus (`pid` 0) at one sampling (t: seconds
    since the campaign began)."""

    t: float
    subject: str
    pid: int
    measure: str
    value: float


@dataclass(frozen=True)
class Drift:
    subject: str
    measure: str
    first: float
    last: float
    samples: int

    def describe(self) -> str:
        return (
            f"{self.subject} {self.measure} rose at every sample after the warm-up, "
            f"{self.first:g} to {self.last:g} over {self.samples} samples"
        )


def drifts(samples: list[Sample], warmup_end: float) -> list[Drift]:
    """Every series that drifts by the module's rule."""
    found = []
    for (subject, measure), series in sorted(_series(samples).items()):
        incarnation = [s for s in series if s.pid == series[-1].pid and s.t >= warmup_end]
        values = [s.value for s in incarnation]
        if len(values) < MIN_JUDGED or _kind(measure) in SHOWN:
            continue
        rising = all(b >= a for a, b in itertools.pairwise(values))
        still_rising = values[-1] > values[len(values) // 2]
        floor = FLOORS[_kind(measure)]
        if rising and still_rising and values[-1] - values[0] > max(GROWTH * values[0], floor):
            found.append(Drift(subject, measure, values[0], values[-1], len(values)))
    return found


def table(samples: list[Sample], warmup_end: float, started: float) -> list[str]:
    """Every series as a markdown row, one column per sampling (its time since `started`, in
    minutes when samplings are a minute or more apart, * marking the warm-up's), and its
    verdict."""
    times = sorted({s.t for s in samples})
    drifting = {(d.subject, d.measure) for d in drifts(samples, warmup_end)}
    header = [f"{_since(t - started, times)}{'*' if t < warmup_end else ''}" for t in times]
    lines = [
        f"| process | measure | {' | '.join(header)} | verdict |",
        f"|---|---|{'---|' * len(times)}---|",
    ]
    for (subject, measure), series in sorted(_series(samples).items()):
        at = {s.t: s for s in series}
        cells = []
        for t in times:
            sample = at.get(t)
            restarted = (
                sample is not None
                and sample.pid != series[0].pid
                and t == min(s.t for s in series if s.pid == sample.pid)
            )
            cells.append("-" if sample is None else f"{'↺' if restarted else ''}{sample.value:g}")
        verdict = "DRIFTS" if (subject, measure) in drifting else "bounded"
        verdict = "shown" if _kind(measure) in SHOWN else verdict
        lines.append(f"| {subject} | {measure} | {' | '.join(cells)} | {verdict} |")
    return lines


def _since(seconds: float, times: list[float]) -> str:
    spacing = min((b - a for a, b in itertools.pairwise(times)), default=60.0)
    return f"{seconds / 60:.0f} min" if spacing >= 60 else f"{seconds:.0f} s"


def _kind(measure: str) -> str:
    return measure.split(" ", 1)[0]


def _series(samples: list[Sample]) -> dict[tuple[str, str], list[Sample]]:
    series: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for sample in sorted(samples, key=lambda s: s.t):
        series[(sample.subject, sample.measure)].append(sample)
    return series

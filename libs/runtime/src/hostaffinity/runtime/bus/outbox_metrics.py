"""The bus-publishing instruments every service that publishes exports, under its outbox's name.

`hostaffinity_bus_outbox_queued{outbox}`: events waiting for NATS; `hostaffinity_bus_outbox_
dropped_total{outbox}`: events given up (the oldest, at a full outbox; a sampled event, at a full
queue or a failed publish). Both are served at 0 from the moment the publisher exists, so the
bus alerts' `increase()` sees the first drop and a dashboard shows every publisher before
anything went wrong. The durable outbox (outbox.py), the sampled publisher (sampled.py) and the
node-labeller's in-line publishing all count here.
"""

from opentelemetry import metrics

_meter = metrics.get_meter("hostaffinity.runtime")
_queued = _meter.create_up_down_counter(
    "hostaffinity_bus_outbox_queued", description="Bus events waiting to be published, by outbox"
)
_dropped = _meter.create_counter(
    "hostaffinity_bus_outbox_dropped",
    description="Bus events given up, by outbox: the oldest at a full outbox while NATS was "
    "away, or a sampled event the queue or NATS could not take",
)


class OutboxInstruments:
    """One publisher's two series, labelled `outbox=<name>`."""

    def __init__(self, name: str) -> None:
        self._labels = {"outbox": name}
        _queued.add(0, self._labels)
        _dropped.add(0, self._labels)

    def queued(self, change: int) -> None:
        """Events added to (positive) or gone from (negative) what waits."""
        _queued.add(change, self._labels)

    def dropped(self) -> None:
        _dropped.add(1, self._labels)

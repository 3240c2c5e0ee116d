"""Observable instruments (gauges, observed counters) that report what the latest reader says.

OpenTelemetry's meter keeps one instrument per name for the whole process, with the callbacks
of its first registration: a later registration under the name gets the first instrument back
and its callbacks are never called (opentelemetry-sdk `Meter.create_observable_gauge`, 1.3x). A
process may build a service's parts more than once, though: a replica that leads again builds
them anew, and tests run several services in one process. So each instrument is registered once,
with a callback reading the one slot every later `observe_latest` of that name fills: the parts
built last are the ones reported. This is the only process-wide state of the kind; a service's
metrics object is built by its wiring and handed to the parts that record into it.
"""

from collections.abc import Callable, Iterable
from typing import Final, Literal

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

Observe = Callable[[], Iterable[Observation]]
Kind = Literal["gauge", "counter"]


class _Latest:
    """One instrument's callback: it calls whichever reader was given last."""

    def __init__(self, observe: Observe) -> None:
        self.observe = observe

    def __call__(self, _options: CallbackOptions) -> Iterable[Observation]:
        return self.observe()


# (meter name, instrument name) -> its slot: one per instrument OpenTelemetry keeps.
_SLOTS: Final[dict[tuple[str, str], _Latest]] = {}


def observe_latest(
    meter: str,
    name: str,
    observe: Observe,
    *,
    description: str,
    unit: str = "",
    kind: Kind = "gauge",
) -> None:
    """Serve the observable `kind` instrument `name` of `meter` from `observe` (and from any
    later reader given under the name, once there is one)."""
    slot = _SLOTS.get((meter, name))
    if slot is not None:
        slot.observe = observe
        return
    slot = _SLOTS[(meter, name)] = _Latest(observe)
    create = metrics.get_meter(meter)
    if kind == "gauge":
        create.create_observable_gauge(name, [slot], unit, description)
    else:
        create.create_observable_counter(name, [slot], unit, description)

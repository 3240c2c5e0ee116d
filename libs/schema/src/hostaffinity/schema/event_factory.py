"""Events built in one place: the `type` tag and the id come from the event's class, the
`source` from the publishing service, `occurred_at` from the clock unless given.

A service binds one `EventFactory` to its name (the runner hands each work its own,
`ServiceContext.event_factory`) and passes it to whatever builds events; pure cores take it as a
value like any other. The id is `event_id` of the class's tag and the parts that name the fact,
so it is the same as every release before this one computed by hand.
"""

from dataclasses import dataclass
from typing import Any, TypeVar

from hostaffinity.schema.events import Event, event_id, event_type_of
from hostaffinity.schema.timestamps import utc_timestamp

E = TypeVar("E", bound=Event)


def id_of(message: type[Event], *parts: object) -> str:
    """The deterministic id of the fact `parts` name, for an event of class `message`."""
    return event_id(event_type_of(message), *parts)


@dataclass(frozen=True, slots=True)
class EventFactory:
    """Builds the events one service publishes, `source` being its name (`node-labeller`)."""

    source: str

    def new(
        self,
        event_class: type[E],
        /,
        *id_parts: object,
        occurred_at: str | None = None,
        **fields: Any,
    ) -> E:
        """An `event_class` event with the id of `id_parts` and the class's own `fields`
        (positional-only, so that a field may be called anything, `message` included)."""
        return event_class(
            id=id_of(event_class, *id_parts),
            occurred_at=utc_timestamp() if occurred_at is None else occurred_at,
            source=self.source,
            **fields,
        )

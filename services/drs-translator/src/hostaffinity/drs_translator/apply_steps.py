"""The DRS apply path's steps, named once for the applier, its kept announcements and the test
that kills the translator at each (test-only kill points: runtime checkpoints.py)."""

from typing import Final

from hostaffinity.runtime.process.checkpoints import WritePath

# A batch's steps, between its awaits (test-only kill points: runtime checkpoints.py): each
# intent recorded, the reconfigure made, the event kept, each record confirmed, the event handed
# to the outbox, and (announcements.py) the event published, before its kept copy goes.
DRS_APPLY_PATH: Final = WritePath(
    "drs-apply",
    (
        "planned",
        "intent-recorded",
        "reconfigured",
        "announcement-kept",
        "record-confirmed",
        "event-queued",
        "published",
    ),
)

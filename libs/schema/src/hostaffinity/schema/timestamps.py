"""The one timestamp format of hostaffinity: events, KV values and Kubernetes MicroTime fields."""

from datetime import UTC, datetime


def utc_timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 in UTC with exactly six fractional digits (`2026-01-02T03:04:05.000000Z`).

    Always six digits: `isoformat()` drops them when microsecond == 0, and the API server then
    rejects a MicroTime with 400.
    """
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

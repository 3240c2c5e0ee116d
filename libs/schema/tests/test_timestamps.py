"""The one timestamp format: six fractional digits always (a MicroTime the API server accepts)."""

from datetime import UTC, datetime, timedelta, timezone

from hostaffinity.schema import utc_timestamp


def test_always_six_fractional_digits_in_utc() -> None:
    assert utc_timestamp(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"
    later = datetime(2026, 1, 2, 5, 4, 5, 7, tzinfo=timezone(timedelta(hours=2)))
    assert utc_timestamp(later) == "2026-01-02T03:04:05.000007Z"

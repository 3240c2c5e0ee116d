"""A bucket's live keys and values at one moment, read through one watch (an ordered consumer
that replays the latest revision of each key): deleted keys are left out."""

from nats.js.kv import KeyValue

from hostaffinity.runtime.bus.kv import ONE_SHOT_INACTIVE_SECONDS


async def live_entries(kv: KeyValue, keys: str = ">") -> dict[str, bytes]:
    """Every live key `keys` matches, with its latest value."""
    entries: dict[str, bytes] = {}
    # Its consumer goes soon after the read: nats-py's default keeps it 5 minutes, and reads in a
    # loop (a test's poll, `fleet exposure` in a watch) would fill the stream's consumer cap.
    watcher = await kv.watch(keys, inactive_threshold=ONE_SHOT_INACTIVE_SECONDS)
    try:
        async for entry in watcher:
            if entry is None:
                break
            if entry.operation is None:
                entries[entry.key] = entry.value or b""
            else:
                entries.pop(entry.key, None)
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
    return entries

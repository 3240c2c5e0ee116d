"""A bucket's live keys and values at one moment, read through one watch (an ordered consumer
that replays the latest revision of each key): deleted keys are left out."""

from nats.js.kv import KeyValue


async def live_entries(kv: KeyValue, keys: str = ">") -> dict[str, bytes]:
    """Every live key `keys` matches, with its latest value."""
    entries: dict[str, bytes] = {}
    watcher = await kv.watch(keys)
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

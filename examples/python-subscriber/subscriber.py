"""A subscriber of hostaffinity's events, outside hostaffinity: nats-py, the published JSON
Schemas (proto/schemas) and sqlite. Run `hostaffinity bus subscriber add NAME --events ...`
first: it prints the seed file; the durable consumer NAME is made for you.

At-least-once in, exactly-once out: each event's effect (here, a row in `handled`) and the
record of its id (`seen`) are written in one sqlite transaction, and the event is acked only
after that commit. Killed at any point, the program restarts where its consumer stopped; what
it had committed but not acked comes again and is skipped by id.

    pip install nats-py[nkeys] jsonschema      # Python 3.11 or later
    python subscriber.py --nats nats://127.0.0.1:4222 --name cmdb \
        --seed .cache/dev/nats/subscribers/cmdb.nk --schemas proto/schemas --store cmdb.sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sqlite3
import ssl
import sys
from pathlib import Path

import jsonschema
import nats
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext
from nats.js.errors import ServiceUnavailableError

STREAM = "HOSTAFFINITY_EVENTS"
BATCH = 100


def load_schemas(folder: Path) -> dict[str, jsonschema.Draft202012Validator]:
    """A validator per event type, found by the `type` each schema fixes."""
    validators = {}
    for path in folder.glob("*.json"):
        schema = json.loads(path.read_text(encoding="utf-8"))
        definition = schema["$defs"][path.stem]
        tag = definition.get("properties", {}).get("type", {}).get("enum", [None])[0]
        if tag is not None:
            validators[tag] = jsonschema.Draft202012Validator(schema)
    return validators


def open_store(path: Path) -> sqlite3.Connection:
    store = sqlite3.connect(path, isolation_level=None)  # transactions are explicit below
    store.execute("PRAGMA journal_mode=WAL")
    store.execute("PRAGMA synchronous=FULL")
    store.execute("CREATE TABLE IF NOT EXISTS seen (id TEXT PRIMARY KEY)")
    store.execute(
        "CREATE TABLE IF NOT EXISTS handled ("
        "row INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT, type TEXT, occurred_at TEXT, body TEXT)"
    )
    return store


def handle_once(store: sqlite3.Connection, event: dict[str, object], body: str) -> bool:
    """Record the event's effect unless its id was handled before; True when it was new."""
    store.execute("BEGIN IMMEDIATE")
    try:
        if store.execute("INSERT OR IGNORE INTO seen VALUES (?)", (event["id"],)).rowcount == 0:
            store.execute("ROLLBACK")
            return False
        # Your handling goes here, inside the transaction (a CMDB row, an audit line...).
        store.execute(
            "INSERT INTO handled (id, type, occurred_at, body) VALUES (?, ?, ?, ?)",
            (event["id"], event["type"], event["occurred_at"], body),
        )
        store.execute("COMMIT")
        return True
    except BaseException:
        store.execute("ROLLBACK")
        raise


async def next_batch(pull: JetStreamContext.PullSubscription) -> list[Msg]:
    """Up to BATCH events; none when none came within a second."""
    try:
        return await pull.fetch(BATCH, timeout=1)
    except TimeoutError:
        # Nothing came. nats-py raises its own TimeoutError or, when the time ran out between
        # its two pull requests, asyncio's: both are the builtin TimeoutError (Python >= 3.11).
        return []
    except ServiceUnavailableError:
        # 503, no responders: right after `bus subscriber add`, the consumer's leader may not
        # have told every server yet that it takes pull requests. Ask again.
        await asyncio.sleep(0.5)
        return []


async def run(args: argparse.Namespace) -> None:
    validators = load_schemas(Path(args.schemas))
    store = open_store(Path(args.store))
    tls = ssl.create_default_context(cafile=args.ca) if args.ca else None
    nc = await nats.connect(
        args.nats,
        nkeys_seed=args.seed,
        tls=tls,
        inbox_prefix=f"_INBOX_{args.name}",  # the only inbox the subscriber's identity may use
        name=f"subscriber-{args.name}",
    )
    # Bind to the consumer `bus subscriber add` made: the identity may not create one.
    pull = await nc.jetstream().pull_subscribe_bind(args.name, stream=STREAM)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    new = skipped = 0
    try:
        while not stopping.is_set():
            batch = await next_batch(pull)
            for message in batch:
                try:
                    event = json.loads(message.data)
                    validator = validators.get(event.get("type"))
                    if validator is None:  # a type newer than our schemas: not ours to judge
                        await message.ack()
                        continue
                    validator.validate(event)
                except (ValueError, AttributeError, jsonschema.ValidationError) as error:
                    print(f"invalid event on {message.subject}: {error}", file=sys.stderr)
                    await message.term()  # never valid, never redelivered
                    continue
                if handle_once(store, event, message.data.decode()):
                    new += 1
                else:
                    skipped += 1
                await message.ack()
            if batch:
                print(f"handled {new}, duplicates skipped {skipped}", flush=True)
    finally:
        await nc.drain()
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nats", action="append", required=True, help="server URL; repeatable")
    parser.add_argument("--name", required=True, help="the subscriber (and consumer) name")
    parser.add_argument("--seed", required=True, help="the subscriber's nkey seed file")
    parser.add_argument("--ca", help="CA file of the servers' certificate (TLS)")
    parser.add_argument("--schemas", required=True, help="the published proto/schemas folder")
    parser.add_argument("--store", required=True, help="the sqlite file of handled events")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

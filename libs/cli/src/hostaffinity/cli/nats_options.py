"""The `--nats…` options every command that reads the bus takes: where NATS is and as whom.

The CLI's own identity is `cli` (read-only, see bus_access.py); `make dev` writes its nkey seed
to `.cache/dev/nats/cli.nk`. TLS is on when a CA is given.
"""

from __future__ import annotations

import argparse

from hostaffinity.runtime.process.config import NatsSettings


def add_nats_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nats", default="nats://127.0.0.1:4222", help="a NATS server URL")
    parser.add_argument(
        "--nats-seed",
        help="the nkey seed file of the CLI's bus identity, e.g. .cache/dev/nats/cli.nk",
    )
    parser.add_argument("--nats-ca-file", help="the CA that signed the NATS servers' certificate")


def nats_settings(args: argparse.Namespace) -> NatsSettings:
    """NatsSettings from the options: the identity `cli` when a seed is given."""
    return NatsSettings(
        servers=[args.nats],
        identity=None if args.nats_seed is None else "cli",
        nkey_seed_file=args.nats_seed,
        tls_ca_file=args.nats_ca_file,
    )

"""`uv run --frozen python -m tests.campaign --seed S --minutes M [--upgrade] [--workdir DIR]`:
one fault campaign over the whole system; exits 1 naming the first broken invariant. With
`--upgrade` the first install starts on the previous release and is rolled onto this tree's.
With `--soak`, the steady workload under light faults (or none: `--no-faults`), every process
and bus sampled every `--sample-every` (5m), exiting 1 also on a measure that drifts after
`--warmup` (10m)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from tests.campaign.runner import Soak, campaign


def duration(text: str) -> float:
    """Seconds from `20s`, `5m` or `5` (minutes)."""
    try:
        if text.endswith("s"):
            return float(text[:-1])
        return float(text.removesuffix("m")) * 60
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 20s or 5m") from None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.campaign", description=__doc__)
    parser.add_argument("--seed", type=int, required=True, help="replays the same fault schedule")
    parser.add_argument(
        "--minutes", type=float, default=1.0, help="workload and faults last this long"
    )
    parser.add_argument(
        "--upgrade",
        action="store_true",
        help="start the first install on the previous release and roll it onto this tree's",
    )
    parser.add_argument("--workdir", type=Path, help="logs and state (default: a new temp dir)")
    parser.add_argument("--soak", action="store_true", help="a soak: steady workload, sampled")
    parser.add_argument("--sample-every", type=duration, help="a soak's sampling period (5m)")
    parser.add_argument("--warmup", type=duration, help="a soak's samples not judged (10m)")
    parser.add_argument("--no-faults", action="store_true", help="a soak without faults")
    args = parser.parse_args()
    soak_only = (args.no_faults, args.sample_every is not None, args.warmup is not None)
    if any(soak_only) and not args.soak:
        parser.error("--sample-every, --warmup and --no-faults are for a --soak")
    if args.soak and args.upgrade:
        parser.error("--upgrade is a fault of a campaign, not of a --soak's steady run")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"campaign-{args.seed}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.sample_every is not None and args.sample_every <= 0:
        parser.error("--sample-every must be more than 0")
    soak = None
    if args.soak:
        defaults = Soak()
        soak = Soak(
            args.sample_every or defaults.sample_every_s,
            args.warmup if args.warmup is not None else defaults.warmup_s,
            not args.no_faults,
        )
    sys.exit(asyncio.run(campaign(args.seed, args.minutes, workdir, soak, upgrade=args.upgrade)))


if __name__ == "__main__":
    main()

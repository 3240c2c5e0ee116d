"""`uv run --frozen python -m tests.campaign --seed S --minutes M [--upgrade] [--workdir DIR]`:
one fault campaign over the whole system; exits 1 naming the first broken invariant."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from tests.campaign.runner import campaign


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
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"campaign-{args.seed}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    sys.exit(asyncio.run(campaign(args.seed, args.minutes, workdir, upgrade=args.upgrade)))


if __name__ == "__main__":
    main()

"""Figures every benchmark prints: percentiles and this process's peak RSS."""

import resource
from collections.abc import Sequence


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The sample below which `fraction` of the samples lie (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def peak_rss_mib() -> float:
    """The highest resident set size this process has had, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mib() -> float:
    """This process's resident set size now, in MiB (what it holds at this point, not its peak)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")

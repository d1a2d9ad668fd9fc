"""The arithmetic of :mod:`bench.burst_bench` (a report, not a test): what kind of failure a refused create
was, latency percentiles, and Prometheus histograms read before and after a burst.

Pure: no I/O, no clock, so the figures BENCHMARKS.md quotes are computed by tested code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from bench.e2e_shapes import percentile

Labels = tuple[tuple[str, str], ...]
SampleKey = tuple[str, Labels]
"""``(sample name, sorted labels)``."""
Samples = Mapping[SampleKey, float]


# Failures ---------------------------------------------------------------------------------------------------


def classify(status: int, reason: str, message: str) -> str:
    """The kind of one failed create, from the client's error (``status`` 0 when the API server did not answer):

    * ``webhook timeout`` - the API server gave up waiting on an admission webhook;
    * ``webhook unreachable`` - the API server could not call an admission webhook at all;
    * ``webhook denied`` - an admission webhook refused the object (its message follows, trimmed);
    * ``client timeout`` / ``client connection`` - no answer from the API server in the client's time;
    * ``HTTP <status> <reason>`` - anything else the API server refused (429 TooManyRequests, 409...).
    """
    text = " ".join(message.split())
    lowered = text.lower()
    if "failed calling webhook" in lowered or "failed to call webhook" in lowered:
        unquoted = re.sub(r'"[^"]*"', "", lowered)  # the webhook's name and URL (``?timeout=5s``) say nothing
        if any(word in unquoted for word in ("deadline exceeded", "timeout", "timed out")):
            return "webhook timeout"
        return "webhook unreachable"
    if "admission webhook" in lowered and "denied the request" in lowered:
        said = text.split("denied the request", 1)[1].lstrip(": ")
        return f"webhook denied: {said[:80]}" if said else "webhook denied"
    if status == 0:
        return "client timeout" if reason == "Timeout" else "client connection"
    return f"HTTP {status} {reason}".rstrip()


def ours(kind: str) -> bool:
    """Whether a failure kind is on our side (the webhook's) rather than the API server's or the client's."""
    return kind.startswith("webhook")


@dataclass(frozen=True, slots=True)
class Latency:
    """p50 / p99 / max of some durations, in milliseconds (``nan`` when there are none)."""

    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def latency(seconds: Iterable[float]) -> Latency:
    values = list(seconds)
    if not values:
        return Latency(0, math.nan, math.nan, math.nan)
    return Latency(len(values), percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000,
                   max(values) * 1000)


# Prometheus samples --------------------------------------------------------------------------------------------


def parse_samples(text: str, prefixes: tuple[str, ...]) -> dict[SampleKey, float]:
    """Every sample whose name starts with one of ``prefixes``, by name and labels."""
    out: dict[SampleKey, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(prefixes):
                key = (sample.name, tuple(sorted(sample.labels.items())))
                out[key] = out.get(key, 0.0) + sample.value
    return out


def delta(before: Samples, after: Samples) -> dict[SampleKey, float]:
    """What each sample gained between two readings (a sample absent before counts from zero)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def _matches(labels: Labels, match: Mapping[str, str]) -> bool:
    have = dict(labels)
    return all(have.get(name) == value for name, value in match.items())


def total(samples: Samples, name: str, match: Mapping[str, str] | None = None) -> float:
    """The sum of ``name`` over every label set that has ``match``."""
    return sum(value for (sample, labels), value in samples.items()
               if sample == name and _matches(labels, match or {}))


def by_label(samples: Samples, name: str, label: str, match: Mapping[str, str] | None = None) -> dict[str, float]:
    """``name`` summed per value of ``label`` (over label sets that have ``match``); zero sums left out."""
    out: dict[str, float] = {}
    for (sample, labels), value in samples.items():
        if sample == name and _matches(labels, match or {}):
            key = dict(labels).get(label, "")
            out[key] = out.get(key, 0.0) + value
    return {key: value for key, value in out.items() if value}


def histogram_quantile(samples: Samples, histogram: str, fraction: float,
                       match: Mapping[str, str] | None = None) -> float:
    """The ``fraction`` quantile of a Prometheus histogram (``<histogram>_bucket`` samples summed over label
    sets that have ``match``), interpolated linearly inside its bucket as Prometheus does; the lowest bucket
    starts at 0, and a quantile in the ``+Inf`` bucket is the highest finite bound. ``nan`` without
    observations."""
    buckets: dict[float, float] = {}
    for (sample, labels), value in samples.items():
        if sample != f"{histogram}_bucket" or not _matches(labels, match or {}):
            continue
        bound = float(dict(labels)["le"])
        buckets[bound] = buckets.get(bound, 0.0) + value
    ordered = sorted(buckets.items())
    if not ordered or ordered[-1][1] <= 0:
        return math.nan
    rank = fraction * ordered[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound

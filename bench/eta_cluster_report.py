"""What :mod:`bench.eta_cluster` measured, and its BENCHMARKS.md section: the predictions, the starts, the
errors by estimator and by the time still ahead of a prediction, and the dump that keeps a run for later reading.

Pure but for the dump's file: no cluster, no clock, so the figures BENCHMARKS.md quotes come from tested code.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.machine import header

FLOOR = 10.0
"""Seconds: the least wait an error is relative to (a job that starts at once would make any error huge)."""
PICKS = ("estimate", "no handoff", "controller", "naive", "naive/running")
AHEAD_BINS = (0.0, 15.0, 60.0, 120.0, 240.0)
"""Edges, in seconds, of the bins of the time still ahead of a prediction (the last bin is open)."""
AHEAD_PICKS = ("estimate", "naive")


@dataclass
class Prediction:
    key: tuple[str, str]
    at: float
    values: dict[str, float | None]


@dataclass
class Outcome:
    submitted: dict[tuple[str, str], float] = field(default_factory=dict)
    started: dict[tuple[str, str], float] = field(default_factory=dict)
    predictions: list[Prediction] = field(default_factory=list)
    rounds: int = 0
    peak: int = 0
    cpu: list[float] = field(default_factory=list)
    timeline: dict[tuple[str, str], dict[str, float | None]] = field(default_factory=dict)
    """Per job: when it was last admitted and when it completed (for ``--dump``)."""
    queue_writes: float = 0.0
    """Writes of the Queues (their status) the API server served from the first submission to the last start."""
    source: str = ""
    """Where the outcome was read from, when it was (``--from-dump``); empty for a run of this process."""


def relative_errors(cases: Iterable[tuple[float | None, float | None, float]], floor: float) -> tuple[list[float], int]:
    """Per ``(actual start, predicted start, since)`` of a prediction: ``|predicted - actual|`` relative to the
    time from ``since`` to the start (at least ``floor``). A job that never started is not judged; a prediction
    without a figure is counted as missing. Both benches of the estimates judge by this rule."""
    found: list[float] = []
    missing = 0
    for actual, guess, since in cases:
        if actual is None:
            continue
        if guess is None:
            missing += 1
            continue
        found.append(abs(guess - actual) / max(actual - since, floor))
    return found, missing


def errors(outcome: Outcome, pick: str, *, ahead: bool) -> tuple[list[float], int]:
    """The relative errors of ``pick``'s predictions of jobs that started (to the whole wait, or with ``ahead``
    to the wait still ahead), and how many predictions of such jobs had no figure."""
    return relative_errors(((outcome.started.get(p.key), p.values.get(pick),
                             p.at if ahead else outcome.submitted.get(p.key, p.at)) for p in outcome.predictions),
                           FLOOR)


def signed(outcome: Outcome, pick: str) -> str:
    """The median of predicted - actual start, in seconds (negative: the predictions were early)."""
    found = [guess - actual for prediction in outcome.predictions
             if (actual := outcome.started.get(prediction.key)) is not None
             and (guess := prediction.values.get(pick)) is not None]
    return f"{statistics.median(found):+.0f} s" if found else "-"


def by_time_ahead(outcome: Outcome, pick: str) -> list[tuple[int, float, float] | None]:
    """Per bin of :data:`AHEAD_BINS` (the actual time from the prediction to the start): how many predictions,
    the p50 of their |error| relative to the whole wait, and the median of the signed one (negative: early).
    ``None`` for a bin with no prediction. Tells a bias that grows with the time ahead from noise."""
    bins: list[list[float]] = [[] for _ in AHEAD_BINS]
    for prediction in outcome.predictions:
        actual = outcome.started.get(prediction.key)
        guess = prediction.values.get(pick)
        if actual is None or guess is None:
            continue
        ahead = actual - prediction.at
        index = max(i for i, edge in enumerate(AHEAD_BINS) if ahead >= edge) if ahead >= 0 else 0
        wait = max(actual - outcome.submitted.get(prediction.key, prediction.at), FLOOR)
        bins[index].append((guess - actual) / wait)
    return [(len(found), nearest_rank(sorted(abs(v) for v in found), 0.5), statistics.median(found))
            if found else None for found in bins]


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``ordered`` (sorted, not empty) at rank ``round(q * n)``, as the published figures
    of both benches of the estimates are computed."""
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def cell(values: tuple[list[float], int]) -> str:
    """``p50 / p90 (share of predictions with a figure)`` of :func:`relative_errors`' answer; ``-`` for none."""
    found, missing = values
    if not found:
        return "-"
    ordered = sorted(found)
    return (f"{nearest_rank(ordered, 0.5):.2f} / {nearest_rank(ordered, 0.9):.2f} "
            f"({100 * len(found) / (len(found) + missing):.0f} %)")


def _bin_title(index: int) -> str:
    low = AHEAD_BINS[index]
    return f"{low:.0f}-{AHEAD_BINS[index + 1]:.0f} s" if index + 1 < len(AHEAD_BINS) else f"over {low:.0f} s"


def _ahead_cell(found: tuple[int, float, float] | None) -> str:
    return "-" if found is None else f"{found[1]:.2f} ({found[2]:+.2f}, {found[0]})"


def _seed_line(seed: int, jobs: int, outcome: Outcome) -> str:
    if outcome.source:
        return (f"- seed {seed}: {jobs} Jobs, {len(outcome.predictions)} predictions, read from "
                f"`{outcome.source}`.")
    return (f"- seed {seed}: {jobs} Jobs, {outcome.rounds} rounds of predictions, {len(outcome.predictions)} "
            f"predictions, at most {outcome.peak} jobs waiting; estimate CPU per round (every waiting job at "
            f"once): median {statistics.median(outcome.cpu) if outcome.cpu else 0:.2f} s; {outcome.queue_writes:.0f} "
            f"writes of the Queues ({outcome.queue_writes / max(1, jobs):.1f} a Job).")


def report(runs: Sequence[tuple[int, int, Outcome | None, str]], command: str) -> str:
    """The section: per trace (seed, jobs, outcome or the problem), one row of each measure."""
    lines = header("Start estimates on the dev cluster (issue 36)", command)
    measured = [(seed, jobs, outcome) for seed, jobs, outcome, _ in runs if outcome is not None]
    lines += [f"- seed {seed}: not measured: {problem}" for seed, _, outcome, problem in runs if outcome is None]
    lines += [_seed_line(seed, jobs, outcome) for seed, jobs, outcome in measured]
    head = ["| trace | " + " | ".join(PICKS) + " |", "|---|" + "---|" * len(PICKS)]
    for title, row in (
        ("Error relative to the job's whole wait:", lambda outcome, pick: cell(errors(outcome, pick, ahead=False))),
        ("Relative to the wait still ahead at the prediction:", lambda outcome, pick: cell(errors(outcome, pick,
                                                                                                ahead=True))),
        ("Median of predicted - actual start (- early, + late):", signed),
    ):
        lines += ["", title, "", *head]
        lines += [f"| `--seed {seed}` | " + " | ".join(row(outcome, pick) for pick in PICKS) + " |"
                  for seed, _, outcome in measured]
    titles = [_bin_title(index) for index in range(len(AHEAD_BINS))]
    lines += ["", "By the actual time from the prediction to the start: p50 of |error| relative to the whole wait "
              "(the signed median, - early; how many predictions):", "",
              "| trace | estimator | " + " | ".join(titles) + " |", "|---|---|" + "---|" * len(titles)]
    lines += [f"| `--seed {seed}` | {pick} | " + " | ".join(map(_ahead_cell, by_time_ahead(outcome, pick))) + " |"
              for seed, _, outcome in measured for pick in AHEAD_PICKS]
    lines += ["", "p50 / p90 of |predicted - actual start| / the wait (at least 10 s), over the predictions with a "
              "figure (their share in brackets).", ""]
    return "\n".join(lines) + "\n"


def dump(path: Path, outcome: Outcome) -> None:
    """Every prediction and start of a run, as JSON (:func:`load` reads it back)."""
    path.write_text(json.dumps({
        "submitted": {"/".join(key): at for key, at in outcome.submitted.items()},
        "started": {"/".join(key): at for key, at in outcome.started.items()},
        "timeline": {"/".join(key): value for key, value in outcome.timeline.items()},
        "predictions": [{"job": "/".join(p.key), "at": p.at, **p.values} for p in outcome.predictions],
    }))


def _key(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    return namespace, name


def load(path: Path) -> Outcome:
    """A run :func:`dump` wrote: its predictions, submissions and starts (not its rounds, CPU or writes)."""
    data = json.loads(path.read_text())
    return Outcome(
        submitted={_key(key): float(at) for key, at in data["submitted"].items()},
        started={_key(key): float(at) for key, at in data["started"].items()},
        predictions=[Prediction(_key(item["job"]), float(item["at"]),
                                {pick: item.get(pick) for pick in PICKS}) for item in data["predictions"]],
        timeline={_key(key): value for key, value in data.get("timeline", {}).items()},
        source=str(path),
    )

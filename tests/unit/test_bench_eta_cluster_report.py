"""The dev-cluster start-estimate bench's figures (bench/eta_cluster_report.py): errors by the time still ahead,
and a dumped run read back the same."""

from __future__ import annotations

from pathlib import Path

from bench.eta_cluster_report import AHEAD_BINS, Outcome, Prediction, by_time_ahead, dump, errors, load, report


def _outcome() -> Outcome:
    # One job submitted at 0 that starts at 300: predictions made 290, 200 and 100 s before its start.
    key = ("team", "train-1")
    return Outcome(
        submitted={key: 0.0, ("team", "eval-1"): 0.0},
        started={key: 300.0},  # eval-1 never started: its predictions are not judged
        predictions=[
            Prediction(key, 10.0, {"estimate": 240.0, "naive": 330.0}),  # 290 s ahead: 60 s early
            Prediction(key, 100.0, {"estimate": 270.0, "naive": None}),  # 200 s ahead: 30 s early
            Prediction(key, 200.0, {"estimate": 303.0, "naive": 290.0}),  # 100 s ahead: 3 s late
            Prediction(("team", "eval-1"), 10.0, {"estimate": 50.0, "naive": 60.0}),
        ],
    )


def _rounded(found: tuple[int, float, float] | None) -> tuple[int, float, float] | None:
    return None if found is None else (found[0], round(found[1], 6), round(found[2], 6))


def test_errors_are_binned_by_the_time_still_ahead_relative_to_the_whole_wait() -> None:
    bins = by_time_ahead(_outcome(), "estimate")
    assert len(bins) == len(AHEAD_BINS)
    by_edge = dict(zip(AHEAD_BINS, map(_rounded, bins), strict=True))
    assert by_edge[0.0] is None and by_edge[15.0] is None
    assert by_edge[60.0] == (1, 0.01, 0.01)
    assert by_edge[120.0] == (1, 0.1, -0.1)
    assert by_edge[240.0] == (1, 0.2, -0.2)
    naive = by_time_ahead(_outcome(), "naive")
    assert naive[AHEAD_BINS.index(120.0)] is None  # its one prediction there had no figure
    assert _rounded(naive[AHEAD_BINS.index(240.0)]) == (1, 0.1, 0.1)


def test_the_report_has_a_row_per_trace_and_estimator_by_time_ahead() -> None:
    text = report([(3, 2, _outcome(), ""), (1, 5, None, "cluster did not come up")], "cmd")
    assert "- seed 1: not measured: cluster did not come up" in text
    assert "| trace | estimator | 0-15 s | 15-60 s | 60-120 s | 120-240 s | over 240 s |" in text
    assert "| `--seed 3` | estimate | - | - | 0.01 (+0.01, 1) | 0.10 (-0.10, 1) | 0.20 (-0.20, 1) |" in text
    assert "| `--seed 3` | naive | - | - | 0.03 (-0.03, 1) | - | 0.10 (+0.10, 1) |" in text


def test_a_dumped_run_reads_back_with_the_same_errors(tmp_path: Path) -> None:
    outcome = _outcome()
    dump(tmp_path / "3.json", outcome)
    again = load(tmp_path / "3.json")
    assert again.submitted == outcome.submitted and again.started == outcome.started
    assert again.source == str(tmp_path / "3.json")
    for pick in ("estimate", "naive", "controller"):
        assert errors(again, pick, ahead=False) == errors(outcome, pick, ahead=False)
        assert by_time_ahead(again, pick) == by_time_ahead(outcome, pick)
    assert "read from" in report([(3, 2, again, "")], "cmd")

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


def test_the_simulators_copy_of_a_trace_can_hold_each_room_for_the_control_planes_turn() -> None:
    from bench.eta_cluster import sim_trace  # noqa: PLC0415 - the report tests above need none of the cluster side

    def runs(turn: float) -> list[tuple[str, str, float]]:
        scenario = next(doc for doc in sim_trace(3, turn=turn).objects if doc["kind"] == "Scenario")
        return [(job["manifest"]["metadata"]["name"], job["at"], float(job["runFor"].removesuffix("s")))
                for job in scenario["spec"]["jobs"]]

    plain, turned = runs(0.0), runs(1.5)
    assert len(plain) == len(turned) > 100
    assert [(name, at) for name, at, _ in plain] == [(name, at) for name, at, _ in turned]
    assert all(abs(later - (run + 1.5)) < 0.051 for (_, _, run), (_, _, later) in zip(plain, turned, strict=True))
    assert "1.5 s past its run" in sim_trace(3, turn=1.5).description
    assert "past its run" not in sim_trace(3).description

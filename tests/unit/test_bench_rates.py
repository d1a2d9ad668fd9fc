"""The extender bench's rate arithmetic: the figures BENCHMARKS.md quotes come from it."""

from __future__ import annotations

import pytest

from bench.extender_bench import (
    COST_STEPS,
    HEAD,
    Run,
    _NullExtender,
    bound_times,
    cost_steps,
    print_throughput,
    rates,
    round_order,
)
from webhook.core.sampling import scheduler_sample_size


def test_a_run_no_longer_than_the_head_has_no_later_rate() -> None:
    times = [index * 0.01 for index in range(HEAD)]  # 100 bindings a second
    whole, first, later = rates(times)
    assert whole == pytest.approx(100.0)
    assert first == pytest.approx(100.0)
    assert later is None


def test_the_head_and_the_rest_are_rated_apart() -> None:
    head = [index * 0.01 for index in range(HEAD)]  # 100/s ...
    rest = [head[-1] + (index + 1) * 0.005 for index in range(2 * HEAD)]  # ... then 200/s
    whole, first, later = rates(head + rest)
    assert first == pytest.approx(100.0)
    assert later == pytest.approx(200.0)
    assert whole == pytest.approx((3 * HEAD - 1) / (rest[-1] - head[0]))
    assert later is not None and first < whole < later


def test_a_single_binding_has_no_rate() -> None:
    assert rates([5.0]) == (0.0, 0.0, None)


def test_every_configuration_leads_one_round_in_turn() -> None:
    names = ["none", "none, full scan", "null filter", "filter"]
    orders = [round_order(index, names) for index in range(len(names))]
    assert sorted(order[0] for order in orders) == sorted(names)
    assert all(sorted(order) == sorted(names) for order in orders)


def test_bindings_are_read_from_the_scheduler_log_of_one_namespace() -> None:
    log = [
        'I1201 04:05:01.250000   12345 schedule_one.go:481] "Successfully bound pod to node" pod="bench-a/p-00001" '
        'node="ecs-3" evaluatedNodes=500 feasibleNodes=500',
        'I1201 04:05:00.000001   12345 schedule_one.go:481] "Successfully bound pod to node" pod="bench-a/p-00000" '
        'node="ecs-1" evaluatedNodes=500 feasibleNodes=500',
        'I1201 04:05:00.500000   12345 schedule_one.go:481] "Successfully bound pod to node" pod="bench-b/p-00000" '
        'node="ecs-2" evaluatedNodes=500 feasibleNodes=500',
        'I1201 04:05:02.000000   12345 eventhandlers.go:100] "Add event for unscheduled pod" pod="bench-a/p-00002"',
        "not a klog line",
    ]
    times = bound_times(log, "bench-a", 2026)
    assert len(times) == 2
    assert times[1] - times[0] == pytest.approx(1.249999)
    assert bound_times(log, "bench-c", 2026) == []


def test_the_null_window_passes_back_a_default_sample_moving_on_with_every_call() -> None:
    names = [f"node-{index}" for index in range(501)]
    _NullExtender.start = 0
    windows = [_NullExtender._window(names) for _ in range(3)]
    assert [len(window) for window in windows] == [scheduler_sample_size(501)] * 3 == [230] * 3
    assert windows[0] == names[:230] and windows[1] == names[230:460]
    assert windows[2] == names[460:] + names[:189]  # wraps around
    assert _NullExtender._window(names[:100]) == names[:100]  # no more than the scheduler would score


def test_the_cost_of_filter_is_split_into_its_steps_that_add_up() -> None:
    none, full_scan, null_window, kq = 300.0, 240.0, 200.0, 180.0
    shares = cost_steps([none, full_scan, null_window, kq])
    assert shares == pytest.approx([0.2, 40 / 300, 20 / 300])
    assert sum(shares) == pytest.approx(1 - kq / none)
    assert cost_steps([300.0, 330.0, 300.0])[0] == pytest.approx(-0.1)  # a step that ran faster


def test_the_throughput_report_shows_the_steps_of_each_round(capsys: pytest.CaptureFixture[str]) -> None:
    def run(name: str, round_index: int, rate: float) -> Run:
        return Run(name, round_index, rate, 2.0, None if name.startswith("none") else 0.5, 3.0, 4.0, 0.0, rate, rate)

    rates_by_round = [(300.0, 240.0, 200.0, 180.0), (200.0, 200.0, 150.0, 150.0)]
    runs = [
        run(name, i, rate) for i, row in enumerate(rates_by_round) for name, rate in zip(COST_STEPS, row, strict=True)
    ]
    print_throughput(runs, pods=3000, rounds=2, names=list(COST_STEPS))
    out = capsys.readouterr().out
    assert "round 1: 20.0 / 13.3 / 6.7" in out and "round 2: 0.0 / 25.0 / 0.0" in out
    assert "median:  10.0 / 19.2 / 3.3" in out

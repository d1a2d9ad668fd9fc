"""kube-scheduler's default sample size, a request it cut short, and the window the extender passes back."""

from __future__ import annotations

import pytest

from webhook.core.sampling import looks_sampled, rotating_window, scheduler_sample_size


@pytest.mark.parametrize(
    ("nodes", "size"),
    [(1, 1), (99, 99), (100, 100), (200, 100), (500, 230), (1000, 420), (5000, 500), (50_000, 2500)],
)
def test_the_sample_size_is_kube_schedulers_default(nodes: int, size: int) -> None:
    assert scheduler_sample_size(nodes) == size


@pytest.mark.parametrize(
    ("asked", "nodes", "sampled"),
    [(230, 501, True), (230, 500, True), (500, 501, False), (229, 501, False), (100, 150, True), (50, 50, False)],
)
def test_a_request_looks_sampled_when_it_names_the_default_sample(asked: int, nodes: int, sampled: bool) -> None:
    assert looks_sampled(asked, nodes) is sampled


def test_the_window_wraps_around_and_moves_on() -> None:
    names = [f"n{index}" for index in range(5)]
    window, start = rotating_window(names, 0, 3)
    assert window == ["n0", "n1", "n2"] and start == 3
    window, start = rotating_window(names, start, 3)
    assert window == ["n3", "n4", "n0"] and start == 6
    as_tuple, start = rotating_window(tuple(names), start, 3)  # 6 is 1 modulo 5
    assert as_tuple == ("n1", "n2", "n3") and start == 4

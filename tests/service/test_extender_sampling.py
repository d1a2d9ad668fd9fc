"""The full-scan profile filters every node (``percentageOfNodesToScore: 100``) so the extender sees every unit;
the extender then hands back at most as many of the chosen unit's nodes as the scheduler would have scored by
default, a window that moves on with each pod. A policy pod a sample could mislead whose request names exactly
a moving default sample (the pod on a sampling profile) is flagged, counted and warned about, with what to do
for the pod's profile."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
from prometheus_client import REGISTRY

from tests.service.extender_support import args, bound, eci, ecs, node, pod, policy, virtual_node
from webhook.api.names import DEFAULT_SCHEDULER, FULL_SCAN_SCHEDULER
from webhook.core.sampling import scheduler_sample_size
from webhook.extender.app import SAMPLED_WARNING_SECONDS, log_line, make_app
from webhook.extender.state import ExtenderState

NOW = 1_714_564_800.0


def cluster(pool_a: int, pool_b: int, *, sample: bool = True) -> tuple[ExtenderState, list[str]]:
    """``pool_a`` nodes in pool a, ``pool_b`` in pool b, the virtual node; a policy ``[ecs pool=a, eci]``."""
    state = ExtenderState(sample=sample)
    names = [f"a-{i:04d}" for i in range(pool_a)] + [f"b-{i:04d}" for i in range(pool_b)]
    state.replace_nodes([node(name, pool=name[0]) for name in names] + [virtual_node()])
    state.set_policies([policy(units=[ecs(pool="a"), eci()])])
    state.replace_pods([])
    state.ready = True
    return state, [*names, "virtual-kubelet"]


def test_a_small_pool_among_many_nodes_is_passed_whole() -> None:
    state, names = cluster(20, 480)
    decision = state.filter(pod("p", "1"), names, NOW)
    assert len(decision.passing) == 20 and all(name.startswith("a-") for name in decision.passing)
    assert decision.sampled_from is None


def test_a_large_unit_is_cut_to_the_default_sample_and_the_window_moves_on() -> None:
    state, names = cluster(499, 0)
    windows = [state.filter(pod(f"p{i}", "100m"), names, NOW) for i in range(10)]
    size = scheduler_sample_size(len(names))  # 230 of 500
    assert all(len(d.passing) == size and d.sampled_from == 499 for d in windows)
    assert all(name.startswith("a-") for d in windows for name in d.passing)  # never outside the chosen unit
    assert windows[1].passing[0] == names[size]  # the next window starts where the last one ended
    seen = Counter(name for d in windows for name in d.passing)
    assert set(seen) == set(names[:499])  # every node of the unit comes round
    assert max(seen.values()) - min(seen.values()) <= 1  # evenly
    assert "sampled_from=499" in " ".join(f"{k}={v}" for k, v in windows[0].log_fields().items())


def test_the_window_wraps_round_the_end_of_the_list() -> None:
    state, names = cluster(300, 0)  # 301 names: the sample is 144 of the 300 passing
    size = scheduler_sample_size(len(names))
    assert size == 144
    first, second, third = (state.filter(pod(f"p{i}", "100m"), names, NOW).passing for i in range(3))
    assert first == tuple(names[:144])
    assert second == tuple(names[144:288])
    assert third == tuple(names[288:300] + names[:132])


def test_the_max_of_a_unit_counts_the_same_with_the_window() -> None:
    state = ExtenderState()
    names = [f"a-{i:04d}" for i in range(400)]
    state.replace_nodes([node(name, pool="a") for name in names] + [virtual_node()])
    state.set_policies([policy(units=[ecs(max=3, pool="a"), eci(max=1)])])
    state.replace_pods([])
    state.ready = True
    placed = []
    for index in range(5):
        obj = pod(f"p{index}", "100m")
        decision = state.filter(obj, [*names, "virtual-kubelet"], NOW)
        if decision.passing:
            placed.append(decision.passing[0])
            state.upsert_pod(bound(obj, decision.passing[0]))
    assert [name.startswith("a-") for name in placed] == [True, True, True, False]  # 3 on ecs, 1 on eci, then none
    assert placed[3] == "virtual-kubelet"


def test_without_sampling_every_passing_node_goes_back() -> None:
    state, names = cluster(499, 0, sample=False)
    decision = state.filter(pod("p", "100m"), names, NOW)
    assert len(decision.passing) == 499 and decision.sampled_from is None


def test_a_policy_pod_asked_about_a_moving_default_sample_is_flagged() -> None:
    state, names = cluster(250, 250)  # [ecs pool=a, eci]: 501 nodes, the default sample is 230
    samples = [(names[i * 100 :] + names[: i * 100])[:230] for i in range(3)]  # the start moves on each cycle
    first, second, third = (state.filter(pod(f"p{i}", "100m"), sample, NOW) for i, sample in enumerate(samples))
    assert not first.scheduler_sampled  # nothing to compare with yet
    assert second.scheduler_sampled and third.scheduler_sampled
    assert "scheduler_sampled=true" in log_line(second.log_fields())
    assert not state.filter(pod("q", "100m"), names, NOW).scheduler_sampled  # every node: the full scan


def test_the_same_nodes_each_time_are_a_full_scan_that_passed_that_many_not_a_sample() -> None:
    state, names = cluster(250, 250)
    feasible = names[:230]  # the scheduler's own filters let exactly the default sample's number through
    orders = [feasible, list(reversed(feasible))] * 2  # in another order each time: the scheduler filters in parallel
    decisions = [state.filter(pod(f"p{i}", "100m"), order, NOW) for i, order in enumerate(orders)]
    assert not any(d.scheduler_sampled for d in decisions)


def test_a_pod_with_nothing_to_miss_is_not_flagged() -> None:
    state, names = cluster(250, 250)
    state.set_policies([policy(units=[ecs()])])  # one unit of every regular node: any sample shows it
    assert not any(state.filter(pod(f"p{i}", "100m"), names[i : i + 230], NOW).scheduler_sampled for i in range(3))
    state.set_policies([])
    assert not any(state.filter(pod(f"q{i}", "100m"), names[i : i + 230], NOW).scheduler_sampled for i in range(3))


def test_a_single_pool_unit_is_refused_everywhere_on_a_sample_without_the_pool_and_flagged() -> None:
    state, names = cluster(20, 480)
    state.set_policies([policy(units=[ecs(pool="a")])])
    samples = [names[20 + i * 10 : 250 + i * 10] for i in range(3)]  # pool b only: the pool was not looked at
    decisions = [state.filter(pod(f"p{i}", "100m"), sample, NOW) for i, sample in enumerate(samples)]
    assert not any(d.passing for d in decisions)  # refused although its pool has room: why it needs the full scan
    assert decisions[1].scheduler_sampled and decisions[2].scheduler_sampled
    assert state.filter(pod("q", "100m"), names, NOW).passing  # every node seen: it fits


def test_sampled_requests_are_counted_and_warned_about_now_and_then(caplog: pytest.LogCaptureFixture) -> None:
    state, names = cluster(250, 250)
    clock = [NOW]
    app = make_app(state, clock=lambda: clock[0])
    before = REGISTRY.get_sample_value("kube_queue_extender_scheduler_sampled_filters_total") or 0.0
    with caplog.at_level(logging.WARNING, logger="webhook.extender"):
        for index in range(4):  # the first request has no sample before it to compare with
            if index == 3:
                clock[0] += SAMPLED_WARNING_SECONDS
            obj = pod(f"p{index}", "100m")
            if index == 3:
                obj["spec"]["schedulerName"] = FULL_SCAN_SCHEDULER
            reply = app.filter(args(obj, names[index * 50 : index * 50 + 230]))
            assert reply.status == 200 and reply.then is not None
            reply.then()
    after = REGISTRY.get_sample_value("kube_queue_extender_scheduler_sampled_filters_total")
    assert after == before + 3
    warnings = [r.getMessage() for r in caplog.records if "event=scheduler_sampled" in r.getMessage()]
    assert len(warnings) == 2  # the first, then not again until SAMPLED_WARNING_SECONDS later
    assert "nodes=230 cluster_nodes=501" in warnings[0]
    # A pod on the default profile: it was created before its policy (or outside the webhook's namespaces).
    assert f"scheduler={DEFAULT_SCHEDULER}" in warnings[0] and "recreate it" in warnings[0]
    assert "percentageOfNodesToScore" not in warnings[0]
    # A pod on the full-scan profile: that profile is not configured to filter every node.
    assert f"scheduler={FULL_SCAN_SCHEDULER}" in warnings[1]
    assert f"percentageOfNodesToScore: 100 on the profile {FULL_SCAN_SCHEDULER}" in warnings[1]

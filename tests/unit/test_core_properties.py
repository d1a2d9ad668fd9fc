"""Properties of admission and reclaim over random valid trees and workloads (hypothesis).

The admission pass is also checked against a direct, slow reading of its rules (:func:`reference_pass`):
one candidate per quota, the earliest turn first, a full fit check against the current usage for every
candidate. The optimised pass must admit exactly the same jobs in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import job
from tests.strategies import examples, quota_trees, scenarios
from webhook.api.names import MAX_JOBS
from webhook.core.fit import add_usage, check_fit, check_min, quota_chain, remove_usage
from webhook.core.queueing import PassResult, Policy, admission_pass, order
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY, QuotaNode, QuotaTree
from webhook.core.reclaim import Reclaimer, plan_reclaim
from webhook.core.resources import EMPTY, Resources
from webhook.core.workload import Phase, Workload

SETTINGS = settings(
    max_examples=examples(150),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# Helpers ------------------------------------------------------------------------------------------------------


def reference_pass(
    quota_tree: QuotaTree,
    used: Mapping[str, Resources],
    waiting: list[Workload],
    policies: Mapping[str, Policy],
    rate: Fraction,
) -> tuple[list[Workload], dict[str, Resources]]:
    """The admission rules read literally, one full fit check per candidate."""
    queues: dict[str, list[Workload]] = {}
    for workload in waiting:
        queues.setdefault(workload.quota.lower(), []).append(workload)
    queues = {quota: order(jobs) for quota, jobs in queues.items() if quota in quota_tree.nodes}
    following = dict.fromkeys(queues, 0)
    floors: dict[str, tuple[float, int, str, str]] = {}
    blocked: set[str] = set()
    current = dict(used)
    admitted: list[Workload] = []
    while True:
        candidates = []
        for quota, jobs in queues.items():
            if quota in blocked or following[quota] >= len(jobs):
                continue
            head = jobs[following[quota]]
            turn = (head.created, -head.priority, head.key.namespace, head.key.name)
            candidates.append((max(turn, floors.get(quota, turn)), quota))
        if not candidates:
            return admitted, current
        turn, quota = min(candidates)
        floors[quota] = turn
        head = queues[quota][following[quota]]
        following[quota] += 1
        if check_fit(quota_tree, current, head, rate).fits:
            current = add_usage(quota_tree, current, head)
            admitted.append(head)
        elif policies.get(quota, Policy.ROUND) is Policy.BLOCK:
            blocked.add(quota)


def assert_within_max(quota_tree: QuotaTree, used: Mapping[str, Resources]) -> None:
    for key, quota_node in quota_tree.nodes.items():
        usage = used.get(key, EMPTY)
        for resource, cap in quota_node.max.items():
            assert usage.get_or_zero(resource) <= cap, (quota_node.full_name, resource)


def in_order_by_quota(waiting: list[Workload]) -> dict[str, list[Workload]]:
    queues: dict[str, list[Workload]] = {}
    for workload in waiting:
        queues.setdefault(workload.quota.lower(), []).append(workload)
    return {quota: order(jobs) for quota, jobs in queues.items()}


def run_pass(scenario: tuple[QuotaTree, list[Workload], dict[str, Policy]]) -> PassResult:
    quota_tree, waiting, policies = scenario
    return admission_pass(quota_tree, {}, waiting, policies, 1)


# Admission properties -----------------------------------------------------------------------------------------


@SETTINGS
@given(scenarios())
def test_no_pass_pushes_any_level_over_max_at_oversell_1(
    scenario: tuple[QuotaTree, list[Workload], dict[str, Policy]],
) -> None:
    quota_tree, waiting, policies = scenario
    half = len(waiting) // 2
    first = admission_pass(quota_tree, {}, waiting[:half], policies, 1)
    assert_within_max(quota_tree, first.used)
    second = admission_pass(quota_tree, first.used, waiting[half:], policies, 1)
    assert_within_max(quota_tree, second.used)
    assert dict(second.used) == add_usage(quota_tree, first.used, *second.admitted)


@SETTINGS
@given(scenarios(), st.sampled_from([Fraction(1), Fraction(3, 2), Fraction(2)]))
def test_the_pass_admits_exactly_what_the_literal_rules_admit(
    scenario: tuple[QuotaTree, list[Workload], dict[str, Policy]], rate: Fraction
) -> None:
    quota_tree, waiting, policies = scenario
    result = admission_pass(quota_tree, {}, waiting, policies, rate)
    expected, used = reference_pass(quota_tree, {}, waiting, policies, rate)
    assert [w.key for w in result.admitted] == [w.key for w in expected]
    assert {k: v.without_zeros() for k, v in result.used.items()} == {
        k: v.without_zeros() for k, v in used.items()
    }


@SETTINGS
@given(scenarios())
def test_block_never_admits_a_later_job_while_an_earlier_one_waits(
    scenario: tuple[QuotaTree, list[Workload], dict[str, Policy]],
) -> None:
    _, waiting, policies = scenario
    result = run_pass(scenario)
    admitted = {w.key for w in result.admitted}
    for quota, jobs in in_order_by_quota(waiting).items():
        if policies[quota] is not Policy.BLOCK:
            continue
        flags = [w.key in admitted for w in jobs]
        assert flags == sorted(flags, reverse=True), quota  # admitted jobs form a prefix of the queue


@SETTINGS
@given(scenarios())
def test_positions_are_1_to_n_per_quota_in_queue_order(
    scenario: tuple[QuotaTree, list[Workload], dict[str, Policy]],
) -> None:
    _, waiting, _ = scenario
    result = run_pass(scenario)
    admitted = {w.key for w in result.admitted}
    assert len(admitted) == len(result.admitted)
    assert set(result.positions) | admitted == {w.key for w in waiting}
    assert not set(result.positions) & admitted
    for jobs in in_order_by_quota(waiting).values():
        still = [w for w in jobs if w.key not in admitted]
        assert [result.positions[w.key] for w in still] == list(range(1, len(still) + 1))


@SETTINGS
@given(scenarios())
def test_every_waiting_job_has_a_reason_that_does_not_fit(
    scenario: tuple[QuotaTree, list[Workload], dict[str, Policy]],
) -> None:
    quota_tree, _, policies = scenario
    result = run_pass(scenario)
    assert set(result.reasons) == set(result.positions)
    for key, reason in result.reasons.items():
        assert not reason.fits
        assert reason.explain()
        if reason.blocked_behind is not None:
            assert policies[next(q for q, jobs in result.queues.items() if any(w.key == key for w in jobs))] \
                is Policy.BLOCK
    for jobs in result.queues.values():
        for workload in jobs:
            if result.reasons[workload.key].blocked_behind is None:
                assert not check_fit(quota_tree, result.used, workload, 1).fits


# Reclaim properties -------------------------------------------------------------------------------------------


@st.composite
def reclaim_cases(
    draw: st.DrawFn,
) -> tuple[QuotaTree, list[Workload], dict[str, Resources], Workload, Fraction]:
    """A cluster filled by an admission pass of many small jobs, and a preemptor sized within its min."""
    quota_tree = draw(quota_trees())
    rate = draw(st.sampled_from([Fraction(1), Fraction(2)]))
    leaves = quota_tree.leaves()
    cpu_cap = quota_tree.root.max["cpu"] // 10**9
    mem_cap = quota_tree.root.max["memory"] // 10**9
    home = draw(st.sampled_from(leaves))
    others = [leaf for leaf in leaves if leaf.key != home.key] or [home]
    candidates = []
    for index in range(draw(st.integers(6, 30))):
        leaf = draw(st.sampled_from(others)) if draw(st.integers(0, 9)) else home
        candidates.append(
            job(f"a{index}", namespace=leaf.namespaces[0], quota=leaf.key,
                cpu=draw(st.integers(0, max(1, cpu_cap // 3))), memory=draw(st.integers(0, max(1, mem_cap // 3))),
                priority=draw(st.integers(0, 3)), created=float(index))
        )
    first = admission_pass(quota_tree, {}, candidates, Policy.ROUND, rate)
    running = [
        Workload(key=w.key, quota=w.quota, pod_sets=w.pod_sets, priority=w.priority, created=w.created,
                 phase=Phase.ADMITTED, admitted_at=float(draw(st.integers(0, 30))))
        for w in first.admitted
    ]
    guaranteed = home.min
    preemptor = job(
        "preemptor", namespace=home.namespaces[0], quota=home.key,
        cpu=draw(st.integers(1, max(1, guaranteed.get_or_zero("cpu") // 10**9))),
        memory=draw(st.integers(0, max(0, guaranteed.get_or_zero("memory") // 10**9))),
        priority=draw(st.integers(0, 4)), created=99.0,
    )
    return quota_tree, running, dict(first.used), preemptor, rate


@SETTINGS
@given(reclaim_cases())
def test_reclaim_frees_enough_never_too_much_and_never_below_min(
    case: tuple[QuotaTree, list[Workload], dict[str, Resources], Workload, Fraction],
) -> None:
    quota_tree, running, used, preemptor, rate = case
    plan = plan_reclaim(quota_tree, used, running, preemptor, rate)
    if plan is None:
        return
    victims = list(plan.victims)
    assert victims
    assert len({w.key for w in victims}) == len(victims)
    assert {w.key for w in victims} <= {w.key for w in running}
    after = remove_usage(quota_tree, used, *victims)
    assert dict(plan.used_after_eviction) == after
    # Enough: the preemptor fits once the victims are gone, and the result stays within max × rate.
    assert check_fit(quota_tree, after, preemptor, rate).fits
    if rate == 1:
        assert_within_max(quota_tree, plan.used_after)
    # Never too much: giving any one victim back leaves the preemptor not fitting.
    for victim in victims:
        assert not check_fit(quota_tree, add_usage(quota_tree, after, victim), preemptor, rate).fits
    # Never below min: below the common ancestor with the preemptor, a victim's quota keeps its min in
    # every reclaimed resource the victim holds (checked after the next block).
    own = quota_chain(quota_tree, preemptor.quota)
    assert own is not None
    own_keys = {n.key for n in own}
    # Only from a quota above its min: when a victim is taken, its quota uses more than its min of a resource
    # the preemptor lacks (inside the preemptor's own quota, unless the preemptor is owed its min there).
    contested = {blocker.resource for blocker in check_fit(quota_tree, used, preemptor, rate).blockers}
    owed = own[0].full_name not in {blocker.quota for blocker in check_min(quota_tree, used, preemptor).blockers}
    state: Mapping[str, Resources] = dict(used)
    for victim in victims:
        chain = quota_chain(quota_tree, victim.quota)
        assert chain is not None
        if not (chain[0].key == own[0].key and owed):
            usage = state.get(chain[0].key, EMPTY)
            assert any(
                victim.request_with_count.get_or_zero(resource) > 0
                and usage.get_or_zero(resource) > chain[0].min.get_or_zero(resource)
                for resource in contested
            ), (victim.key, chain[0].full_name)
        state = remove_usage(quota_tree, state, victim)
    depth_of = {level.full_name: depth for depth, level in enumerate(own)}
    blockers = check_fit(quota_tree, used, preemptor, rate).blockers
    for victim in victims:
        chain = quota_chain(quota_tree, victim.quota)
        assert chain is not None
        if chain[0].key == own[0].key:
            assert victim.priority < preemptor.priority
            assert own[0].attributes.get(PREEMPT_POLICY) == PREEMPT_LOWER_PRIORITY
            continue
        # ... in every resource reclaimed from it: those blocking the preemptor at the common ancestor or above.
        meet = next(depth_of[level.full_name] for level in chain if level.key in own_keys)
        reclaimed = {b.resource for b in blockers if depth_of[b.quota] >= meet and b.resource != MAX_JOBS}
        assert any(victim.request.get_or_zero(resource) > 0 for resource in reclaimed), victim.key
        for level in chain:
            if level.key in own_keys:
                break
            usage = after.get(level.key, EMPTY)
            for resource in reclaimed:
                if victim.request.get_or_zero(resource) > 0 and resource in level.min:
                    assert usage.get_or_zero(resource) >= level.min[resource], (level.full_name, resource)


# The reclaimer against the rules read literally ---------------------------------------------------------------


def reference_reclaim(
    quota_tree: QuotaTree,
    used: Mapping[str, Resources],
    running: list[Workload],
    fresh: list[Workload],
    preemptor: Workload,
    rate: Fraction,
    take_room: bool,
    ordered: frozenset[str] = frozenset(),
) -> tuple[list[str], list[str]] | None:
    """``(victims, withheld)`` by name, or ``None``: every candidate in one sorted list, a full fit check after
    each one taken (the slow reading of webhook.core.reclaim's rules). In the ``ordered`` leaves a fresh job
    is only held back with every fresh job the pass admitted after it there."""
    chain = quota_chain(quota_tree, preemptor.quota)
    assert chain is not None
    leaf = chain[0]
    fit = check_fit(quota_tree, used, preemptor, rate)
    entitled = check_min(quota_tree, used, preemptor)
    short = {blocker.quota for blocker in entitled.blockers}
    within = next((depth for depth, level in enumerate(chain) if level.full_name in short), len(chain))
    if fit.fits:
        return ([], []) if take_room and entitled.fits else None
    if any(blocker.never_fits for blocker in fit.blockers):
        return None
    own = leaf.attributes.get(PREEMPT_POLICY) == PREEMPT_LOWER_PRIORITY
    if within == 0 and not own:
        return None
    depth_of = {level.key: depth for depth, level in enumerate(chain)}
    entries = []
    for is_fresh, group in ((True, fresh), (False, running)):
        for index, workload in enumerate(group):
            victim_chain = quota_chain(quota_tree, workload.quota)
            assert victim_chain is not None
            same = victim_chain[0].key == leaf.key
            if same:
                if not (own and workload.priority < preemptor.priority):
                    continue
                guarded: tuple[QuotaNode, ...] = ()
                meet = 0
            else:
                meet = next(depth_of[level.key] for level in victim_chain if level.key in depth_of)
                if within < meet:
                    continue
                guarded = tuple(level for level in victim_chain if level.key not in depth_of)
            if is_fresh:
                rank = float(index)
            else:
                rank = workload.admitted_at if workload.admitted_at is not None else workload.created
            key = workload.key
            order_key = (not is_fresh, same, workload.priority, -rank, key.namespace, key.name, key.kind)
            entries.append((order_key, workload, victim_chain, guarded, same, is_fresh, index, meet))
    entries.sort(key=lambda entry: entry[0])

    def above_min(levels: tuple[QuotaNode, ...], workload: Workload, blockers: tuple[Any, ...],
                  usage: Mapping[str, Resources]) -> bool:
        request = workload.request_with_count
        return all(
            any(
                request.get_or_zero(blocker.resource) > 0
                and usage.get(level.key, EMPTY).get_or_zero(blocker.resource)
                > (0 if blocker.resource == MAX_JOBS else level.min.get_or_zero(blocker.resource))
                for blocker in blockers
            )
            for level in levels
        )

    def keeps_min(levels: tuple[QuotaNode, ...], workload: Workload, usage: Mapping[str, Resources],
                  reclaimed: set[str]) -> bool:
        """It holds a reclaimed resource, and keeps every level at or above min in each one it holds."""
        held = {resource for resource in reclaimed if workload.request.get_or_zero(resource) > 0}
        return bool(held) and all(
            usage.get(level.key, EMPTY).get_or_zero(resource) - workload.request[resource] >= level.min[resource]
            for level in levels
            for resource in held
            if resource in level.min
        )

    current: Mapping[str, Resources] = dict(used)
    blockers = fit.blockers
    chosen: list[tuple[Workload, bool, int]] = []
    stuck: set[str] = set()
    names_depth = {level.full_name: depth for depth, level in enumerate(chain)}
    for _, workload, victim_chain, guarded, same, is_fresh, index, meet in entries:
        names = {level.full_name for level in victim_chain}
        request = workload.request_with_count
        if not any(blocker.quota in names and request.get_or_zero(blocker.resource) > 0 for blocker in blockers):
            take = False
        elif same:
            take = within > 0 or above_min((leaf,), workload, blockers, current)
        else:
            reclaimed = {b.resource for b in fit.blockers if names_depth[b.quota] >= meet and b.resource != MAX_JOBS}
            take = keeps_min(guarded, workload, current, reclaimed)
        if is_fresh and victim_chain[0].key in ordered:
            if victim_chain[0].key in stuck:
                take = False
            elif not take:
                stuck.add(victim_chain[0].key)
        if not take:
            continue
        current = remove_usage(quota_tree, current, workload)
        chosen.append((workload, is_fresh, index))
        after = check_fit(quota_tree, current, preemptor, rate)
        if after.fits:
            break
        blockers = after.blockers
    else:
        return None
    for place in range(len(chosen) - 1, -1, -1):
        workload, is_fresh, index = chosen[place]
        if is_fresh and workload.quota.lower() in ordered and any(
            other_fresh and other.quota.lower() == workload.quota.lower() and other_index < index
            for other, other_fresh, other_index in chosen
        ):
            continue
        restored = add_usage(quota_tree, current, workload)
        if check_fit(quota_tree, restored, preemptor, rate).fits:
            current = restored
            del chosen[place]
    evicted = [w.key.name for w, is_fresh, _ in chosen if not is_fresh]
    return evicted, [w.key.name for w, is_fresh, _ in chosen if is_fresh]


PassCase = tuple[
    QuotaTree, list[Workload], list[Workload], dict[str, Resources], list[Workload], Fraction, bool, frozenset[str]
]


@st.composite
def pass_cases(draw: st.DrawFn) -> PassCase:
    """A cluster filled by running jobs and by jobs a pass just admitted (``fresh``), and a few waiting
    preemptors of any size in any quota."""
    quota_tree, running, used, _, rate = draw(reclaim_cases())
    cut = draw(st.integers(0, len(running)))
    fresh = [
        Workload(key=w.key, quota=w.quota, pod_sets=w.pod_sets, priority=w.priority, created=w.created)
        for w in running[cut:]
    ]
    leaves = quota_tree.leaves()
    cpu_cap = quota_tree.root.max["cpu"] // 10**9
    mem_cap = quota_tree.root.max["memory"] // 10**9
    preemptors = []
    for index in range(draw(st.integers(1, 4))):
        leaf = draw(st.sampled_from(leaves))
        preemptors.append(
            job(f"p{index}", namespace=leaf.namespaces[0], quota=leaf.key,
                cpu=draw(st.integers(0, max(1, cpu_cap // 2))), memory=draw(st.integers(0, max(1, mem_cap // 2))),
                priority=draw(st.integers(0, 4)), created=99.0 + index)
        )
    ordered = frozenset(leaf.key for leaf in leaves if draw(st.booleans()))
    return quota_tree, running[:cut], fresh, used, preemptors, rate, draw(st.booleans()), ordered


@SETTINGS
@given(pass_cases())
def test_the_reclaimer_plans_exactly_what_the_literal_rules_plan_one_plan_after_the_other(case: PassCase) -> None:
    quota_tree, running, fresh, used, preemptors, rate, take_room, ordered = case
    admitted_order = [w.key for w in fresh]
    reclaimer = Reclaimer(quota_tree, used, running, rate, fresh=fresh, ordered=ordered)
    for preemptor in preemptors:
        plan = reclaimer.plan(preemptor, take_room=take_room)
        expected = reference_reclaim(quota_tree, used, running, fresh, preemptor, rate, take_room, ordered)
        assert (None if plan is None else ([w.key.name for w in plan.victims], [w.key.name for w in plan.withheld])) \
            == expected
        if plan is None:
            assert reclaimer.explain(preemptor).startswith("no reclaim")
            continue
        assert dict(plan.used_after_eviction) == remove_usage(quota_tree, used, *plan.withheld, *plan.victims)
        assert dict(plan.used_after) == add_usage(quota_tree, plan.used_after_eviction, preemptor)
        reclaimer.commit(plan)
        taken = {w.key for w in (*plan.victims, *plan.withheld)}
        running = [w for w in running if w.key not in taken]
        fresh = [w for w in fresh if w.key not in taken]
        if preemptor.quota.lower() in ordered:  # its Block quota's fresh jobs are ahead of it: never held back now
            fresh = [w for w in fresh if w.quota.lower() != preemptor.quota.lower()]
        used = dict(plan.used_after)
        for name in ordered:  # in a Block quota only the back of what the pass admitted is ever held back
            kept = [w.key for w in fresh if w.quota.lower() == name]
            held = [w.key for w in plan.withheld if w.quota.lower() == name]
            assert not held or not kept or max(map(admitted_order.index, kept)) < min(map(admitted_order.index, held))

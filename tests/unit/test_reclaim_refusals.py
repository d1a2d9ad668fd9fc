"""A reclaimer remembers the preemptors it turned away until its next commit (webhook.core.reclaim).

A decision pass tries many waiting jobs of the same size in a row, so :meth:`Reclaimer.plan` remembers a refusal
made before any candidate was looked at, by leaf, request, take_room and (where the leaf preempts its own
jobs) priority. Each test here asks the same reclaimer something that a memo keyed too coarsely, or kept
across a commit, or kept for a refusal that looked at candidates, would answer wrongly.
"""

from __future__ import annotations

from tests.builders import job, node, res, seed_tree, tree
from webhook.core.fit import add_usage
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY, QuotaTree
from webhook.core.reclaim import Reclaimer, ReclaimPlan
from webhook.core.resources import Resources
from webhook.core.workload import Phase, Workload

SEED = seed_tree()


def running(name: str, cpu: int, priority: int, admitted_at: float, quota: str = "department-a",
            namespace: str = "user-a") -> Workload:
    return job(name, namespace=namespace, quota=quota, cpu=cpu, memory=f"{cpu}Gi", priority=priority,
               created=admitted_at - 0.5, phase=Phase.ADMITTED, admitted_at=admitted_at)


def waiting(name: str, cpu: int, priority: int = 0, quota: str = "department-b", namespace: str = "user-c") -> Workload:
    return job(name, namespace=namespace, quota=quota, cpu=cpu, memory=f"{cpu}Gi", priority=priority, created=100)


def reclaimer(quota_tree: QuotaTree, admitted: list[Workload], budget: int | None = None) -> Reclaimer:
    used: dict[str, Resources] = add_usage(quota_tree, {}, *admitted)
    return Reclaimer(quota_tree, used, admitted, 1, budget=budget)


def names(plan: ReclaimPlan | None) -> list[str] | None:
    return None if plan is None else [victim.key.name for victim in plan.victims]


def own_preemption_tree() -> QuotaTree:
    total = res(cpu=100, memory="100Gi")
    return tree(node("root", min=total, max=total, children=(
        node("Department-a", min=res(cpu=60, memory="60Gi"), max=total, namespaces=("user-a", "user-b"),
             attributes={PREEMPT_POLICY: PREEMPT_LOWER_PRIORITY}),
        node("Department-b", min=res(cpu=40, memory="40Gi"), max=total, namespaces=("user-c",)),
    )))


def test_a_refusal_is_not_reused_for_a_higher_priority_job_of_a_quota_that_preempts_its_own() -> None:
    # Department-a runs 100 (min 60) and preempts its own lower-priority jobs: a job of priority 0 has nothing
    # lower to take; the same request at priority 1 (user-b, the same quota) takes a1.
    quota_tree = own_preemption_tree()
    planner = reclaimer(quota_tree, [running("a1", 60, 0, 1), running("a2", 40, 1, 2)])
    assert planner.plan(waiting("low", 30, priority=0, quota="department-a", namespace="user-a")) is None
    urgent = planner.plan(waiting("urgent", 30, priority=1, quota="department-a", namespace="user-b"))
    assert names(urgent) == ["a1"]


def test_a_refusal_is_not_reused_for_a_smaller_request_of_the_same_quota() -> None:
    # Department-b (min 40) may not reclaim for a job that takes it beyond its min, but may for one within.
    planner = reclaimer(SEED, [running("a1", 60, 1, 1), running("a2", 40, 0, 2)])
    assert planner.plan(waiting("large", 50)) is None
    assert names(planner.plan(waiting("small", 10))) == ["a2"]
    assert planner.plan(waiting("large-again", 50)) is None


def test_a_refusal_is_not_reused_with_take_room() -> None:
    # Room is left over: without take_room a job that fits gets no plan; with it, the same job takes the room.
    planner = reclaimer(SEED, [running("a1", 60, 1, 1), running("a2", 20, 0, 2)])
    assert planner.plan(waiting("c", 10)) is None
    room = planner.plan(waiting("c", 10), take_room=True)
    assert room is not None
    assert (room.victims, room.withheld) == ((), ())


def test_a_commit_forgets_the_refusals_made_before_it() -> None:
    # 20 CPUs are idle: a job of Department-b that fits gets no reclaim plan. Another job of Department-b then
    # takes the idle room (committed); the same request no longer fits and now reclaims a2 from Department-a.
    planner = reclaimer(SEED, [running("a1", 60, 1, 1), running("a2", 20, 0, 2)])
    assert planner.plan(waiting("c1", 10)) is None
    room = planner.plan(waiting("c0", 20), take_room=True)
    assert room is not None
    planner.commit(room)
    assert names(planner.plan(waiting("c2", 10))) == ["a2"]


def test_the_same_request_under_parents_with_a_different_max_is_asked_again() -> None:
    # q-small and q-large have the same min and max, and so does the request; but under Team-small (max 20) it
    # would need more than the 2 CPUs q-other borrows, while under Team-large a borrower gives way.
    total = res(cpu=100, memory="100Gi")
    low, high = res(cpu=10, memory="10Gi"), res(cpu=20, memory="20Gi")
    quota_tree = tree(node("root", min=total, max=total, children=(
        node("Team-small", min=res(cpu=20, memory="20Gi"), max=res(cpu=20, memory="20Gi"), children=(
            node("q-small", min=low, max=high, namespaces=("ns-small",)),
            node("q-other", min=low, max=high, namespaces=("ns-other",)),
        )),
        node("Team-large", min=res(cpu=80, memory="80Gi"), max=total, children=(
            node("q-large", min=low, max=high, namespaces=("ns-large",)),
            node("q-borrower", namespaces=("ns-borrower",), max=total),
        )),
    )))
    admitted = [running("o1", 12, 0, 1, quota="q-other", namespace="ns-other"),
                running("b1", 70, 0, 2, quota="q-borrower", namespace="ns-borrower"),
                running("b2", 15, 0, 3, quota="q-borrower", namespace="ns-borrower")]
    planner = reclaimer(quota_tree, admitted)
    assert planner.plan(waiting("small", 10, quota="q-small", namespace="ns-small")) is None
    assert names(planner.plan(waiting("large", 10, quota="q-large", namespace="ns-large"))) == ["b2"]


def test_a_refusal_that_looked_at_candidates_looks_at_them_again() -> None:
    # Department-a runs 70 of its min 60 in two jobs that each would take it below 60: the candidates are
    # looked at and none may go. Asking again looks at them again (and spends the budget again).
    planner = reclaimer(SEED, [running("a1", 50, 0, 1), running("a2", 20, 0, 2),
                               running("b1", 30, 0, 3, quota="department-b", namespace="user-c")], budget=3)
    assert planner.plan(waiting("c1", 10)) is None
    assert planner.visits == 2
    assert planner.plan(waiting("c2", 10)) is None
    assert planner.visits == 3
    assert planner.exhausted

"""Which pods kube-scheduler's preemption may take (webhook/core/preemption.py, docs/pod-quota.md): a table of
the rules, the issue's two escapes among them, and a property that no allowed victim set takes another quota
below its ``min`` in what is contended or leaves the preemptor over ``max``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.builders import job, node, res, seed_tree, tree
from tests.strategies import examples, quota_trees
from webhook.core.fit import add_usage
from webhook.core.podquota import MutableUsage, charge, checked, quota_key
from webhook.core.preemption import PodClaim, PreemptionJudge, held_room_blockers, judge_preemption
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY, QuotaTree
from webhook.core.reclaim import Reclaimer
from webhook.core.workload import Phase

PREEMPT = {PREEMPT_POLICY: PREEMPT_LOWER_PRIORITY}

# root 100 CPU / 100Gi / 4 GPU. Department-a (min 50) and Department-b (min 30) as in the seed; Team-p (min 20,
# max 30) lets its pods preempt its own lower-priority pods. Dept-d (min 0 - all borrowed) holds two teams.
TREE = tree(
    node(
        "root",
        min=res(cpu=100, memory="100Gi", gpu=4),
        max=res(cpu=100, memory="100Gi", gpu=4),
        children=(
            node("Department-a", min=res(cpu=50, memory="50Gi", gpu=2), max=res(cpu=100, memory="100Gi", gpu=4),
                 namespaces=("user-a", "user-b")),
            node("Department-b", min=res(cpu=30, memory="30Gi", gpu=2), max=res(cpu=100, memory="100Gi", gpu=4),
                 namespaces=("user-c",)),
            node("Team-p", min=res(cpu=20, memory="20Gi"), max=res(cpu=30, memory="100Gi"),
                 namespaces=("user-p",), attributes=PREEMPT),
        ),
    )
)
DEEP = tree(
    node(
        "root",
        min=res(cpu=100),
        max=res(cpu=100),
        children=(
            node("Dept-d", min=res(cpu=40), max=res(cpu=100), children=(
                node("Team-1", min=res(cpu=20), max=res(cpu=100), namespaces=("t1",)),
                node("Team-2", min=res(cpu=10), max=res(cpu=100), namespaces=("t2",)),
            )),
            node("Dept-e", min=res(cpu=60), max=res(cpu=100), namespaces=("e",)),
        ),
    )
)


def pod(namespace: str, name: str, cpu: int = 10, *, memory: str | None = None, gpu: int | None = None,
        priority: int = 0, created: float = 0.0) -> PodClaim:
    amounts: dict[str, int | str] = {"cpu": cpu}
    if memory is not None:
        amounts["memory"] = memory
    if gpu is not None:
        amounts["gpu"] = gpu
    return PodClaim(namespace, name, res(**amounts), priority, created)


def usage(quota_tree: QuotaTree, *pods: PodClaim) -> MutableUsage:
    """What ``pods`` (bound, running) use up their quota chains."""
    used: MutableUsage = {}
    for claim in pods:
        leaf = quota_key(quota_tree, claim.namespace)
        if leaf is not None:
            charge(used, quota_tree, leaf, claim.request.items())
    return used


def running(namespace: str, count: int, cpu: int = 10, **kwargs: object) -> list[PodClaim]:
    return [pod(namespace, f"{namespace}-{index}", cpu, **kwargs) for index in range(count)]  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    why: str
    preemptor: PodClaim
    victims: Sequence[PodClaim]
    others: Sequence[PodClaim] = ()
    """Bound pods besides the victims."""
    allowed: bool = False
    reason: str = ""
    """A part of the verdict's reason."""
    quota_tree: QuotaTree | None = TREE


HIGH = 3
CASES = [
    Case(
        "issue 34, escape 1: a colleague's pod of the same quota, which sets no preempt-policy",
        pod("user-a", "mine", 20, priority=HIGH),
        [pod("user-b", "colleague", 20)],
        running("user-a", 2),
        reason="is in root/Department-a, the quota of user-a/mine, which does not set preempt-policy",
    ),
    Case(
        "issue 34, escape 2: Department-b under its min (30 of 40 in the seed; here 20 of 30)",
        pod("user-a", "mine", 20, priority=HIGH),
        running("user-c", 2),
        reason="would leave root/Department-b with cpu 0 < min 30",
    ),
    Case(
        "a quota exactly at its min keeps its pods",
        pod("user-a", "mine", 10, priority=HIGH),
        running("user-c", 1),
        running("user-c", 3)[1:],
        reason="would leave root/Department-b with cpu 20 < min 30",
    ),
    Case(
        "a borrowing quota gives back what it borrows, to a preemptor within its min",
        pod("user-a", "mine", 20, priority=HIGH),
        running("user-c", 2),
        running("user-c", 6)[2:],
        allowed=True,
    ),
    Case(
        "two victims that each keep the min alone but not together",
        pod("user-a", "mine", 20, priority=HIGH),
        running("user-c", 2),
        running("user-c", 4)[2:],
        reason="would leave root/Department-b with cpu 20 < min 30",
    ),
    Case(
        "a preemptor beyond its own min takes nothing from another quota, however much that one borrows",
        pod("user-a", "mine", 20, priority=HIGH),
        running("user-c", 1),
        running("user-a", 4) + running("user-c", 6)[1:],
        reason="would take root/Department-a beyond its guaranteed min",
    ),
    Case(
        "a victim under no quota may go",
        pod("user-a", "mine", 20, priority=HIGH),
        [pod("elsewhere", "web", 20)],
        allowed=True,
    ),
    Case(
        "a preemptor under no quota: Kubernetes' priorities alone",
        pod("elsewhere", "critical", 20, priority=HIGH),
        running("user-c", 2),
        allowed=True,
        reason="is under no quota",
    ),
    Case(
        "no usable tree: Kubernetes' priorities alone",
        pod("user-a", "mine", 20, priority=HIGH),
        [pod("user-b", "colleague", 20)],
        allowed=True,
        quota_tree=None,
    ),
    Case(
        "preempt-policy: PreemptLowerPriority, a preemptor within its min takes its quota's lower-priority pod",
        pod("user-p", "urgent", 10, priority=HIGH),
        [pod("user-p", "batch", 10, priority=1)],
        allowed=True,
    ),
    Case(
        "preempt-policy: never a pod of equal priority",
        pod("user-p", "urgent", 10, priority=HIGH),
        [pod("user-p", "peer", 10, priority=HIGH)],
        reason="is not of lower priority",
    ),
    Case(
        "preempt-policy, beyond its min: while the quota borrows what the victim holds",
        pod("user-p", "urgent", 10, priority=HIGH),
        [pod("user-p", "batch", 10, priority=1)],
        running("user-p", 2),  # 20 + the victim's 10: 30 > min 20
        allowed=True,
    ),
    Case(
        "preempt-policy, beyond its min: a quota at its guarantee does not churn its own pods",
        pod("user-p", "urgent", 20, priority=HIGH),
        [pod("user-p", "batch", 10, priority=1)],
        running("user-p", 1),  # 10 + the victim's 10: at min 20
        reason="a quota at its guarantee does not preempt its own pods",
    ),
    Case(
        "always within max: the preemptor's quota would still be over its max",
        pod("user-p", "urgent", 10, priority=HIGH),
        [pod("elsewhere", "web", 10)],
        running("user-p", 3),  # Team-p at its max 30
        reason="would still be over its quota with these victims gone: pod-level quota (bound and placed pods): "
        "quota root/Team-p: cpu request 10 + used 30 > max 30",
    ),
    Case(
        "always within max: a victim of its own quota makes the room",
        pod("user-p", "urgent", 10, priority=HIGH),
        [pod("user-p", "batch", 10, priority=1)],
        running("user-p", 2),  # 20 + the victim's 10: at max 30
        allowed=True,
    ),
    Case(
        "a victim that holds nothing the preemptor asks for protects its quota's guarantee in nothing, and frees "
        "nothing it needs",
        pod("user-a", "mine", 0, gpu=1, priority=HIGH),
        running("user-c", 1),
        running("user-c", 6)[1:],
        reason="holds none of what user-a/mine asks for (nvidia.com/gpu)",
    ),
    Case(
        "a resource the preemptor does not ask for does not protect the victim's quota (memory under its min)",
        pod("user-a", "mine", 10, priority=HIGH),
        running("user-c", 1, memory="1Gi"),
        running("user-c", 6, memory="1Gi")[1:],
        allowed=True,
    ),
    Case(
        "every resource the preemptor asks for is contended: the victim's quota keeps its memory guarantee",
        pod("user-a", "mine", 10, memory="1Gi", priority=HIGH),
        running("user-c", 1, memory="1Gi"),
        running("user-c", 6, memory="1Gi")[1:],
        reason="would leave root/Department-b with memory 5Gi < min 30Gi",
    ),
    Case(
        "deeper trees: a team within its min takes from a sibling team that borrows (below Dept-d only)",
        pod("t1", "mine", 10, priority=HIGH),
        running("t2", 1),
        running("t1", 1) + running("t2", 4)[1:] + running("e", 2),
        allowed=True,
        quota_tree=DEEP,
    ),
    Case(
        "deeper trees: the same team takes nothing from another department while Dept-d is beyond its min",
        pod("t1", "mine", 10, priority=HIGH),
        running("e", 1),
        running("t1", 1) + running("t2", 4) + running("e", 9)[1:],
        reason="would take root/Dept-d beyond its guaranteed min",
        quota_tree=DEEP,
    ),
    Case(
        "deeper trees: the victim's levels below the common ancestor are guarded, those above are not",
        pod("t1", "mine", 10, priority=HIGH),
        running("t2", 1),
        running("t2", 2)[1:],  # Team-2 at 20 (min 10) borrows; Dept-d at 20 is under its 40, but it is the
        allowed=True,  # common ancestor: the preemptor's own admission there replaces what is freed
        quota_tree=DEEP,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.why for case in CASES])
def test_preemption_follows_the_quota_rules(case: Case) -> None:
    used = usage(case.quota_tree, *case.victims, *case.others) if case.quota_tree is not None else {}
    verdict = judge_preemption(case.quota_tree, case.preemptor, case.victims, used)
    assert verdict.allowed is case.allowed, verdict.reason
    assert case.reason in verdict.reason


def test_no_victim_named_is_no_candidate() -> None:
    verdict = judge_preemption(TREE, pod("user-a", "mine"), [])
    assert not verdict.allowed


def test_the_preemptors_own_placement_is_left_out_by_the_caller_and_usages_add_up() -> None:
    # Team-p at 20 bound + 10 placed elsewhere (assumed): at its max 30 with the preemptor's 10 on top.
    bound = usage(TREE, *running("user-p", 2))
    placed = usage(TREE, pod("user-p", "placed", 10))
    judge = PreemptionJudge(TREE, pod("user-p", "urgent", 10, priority=HIGH), bound, placed)
    assert not judge.judge([pod("elsewhere", "web", 10)]).allowed
    assert judge.judge([pod("user-p", "user-p-0", 10, priority=1)]).allowed


# One rule with job reclaim ------------------------------------------------------------------------------------------

SEED_LEAF = {"user-a": "department-a", "user-b": "department-a", "user-c": "department-b"}


@pytest.mark.parametrize(
    ("a_jobs", "b_jobs", "allowed"),
    [
        (10, 0, True),  # the seed's scenario 3: Department-a borrows 40, Department-b is owed its min
        (7, 3, True),  # Department-a keeps its 60 min after giving one back; Department-b reaches 40
        (6, 4, False),  # Department-b would go beyond its min: it may only use idle capacity
        (8, 2, True),
    ],
)
def test_pod_preemption_and_job_reclaim_take_the_same_victims(a_jobs: int, b_jobs: int, allowed: bool) -> None:
    # The seed's tree full (root 100 CPU), Department-a's and Department-b's work as one-pod jobs of 10 CPU.
    # Job reclaim (the controller) and pod preemption (the extender) answer "may Department-a's newest go for
    # a 10 CPU pod of user-c?" alike: the same rule (webhook/core/guarantee.py) over the same usage.
    quota_tree = seed_tree()
    admitted = [job(f"a{index}", namespace="user-a", quota="department-a", cpu=10, created=float(index),
                    phase=Phase.ADMITTED, admitted_at=float(index)) for index in range(a_jobs)]
    admitted += [job(f"b{index}", namespace="user-c", quota="department-b", cpu=10, created=float(index),
                     phase=Phase.ADMITTED, admitted_at=float(index)) for index in range(b_jobs)]
    waiting = job("c", namespace="user-c", quota="department-b", cpu=10, created=50.0, priority=HIGH)
    plan = Reclaimer(quota_tree, add_usage(quota_tree, {}, *admitted), admitted, 1).plan(waiting)
    reclaimed = plan is not None and [victim.key.name for victim in plan.victims] == [f"a{a_jobs - 1}"]
    pods = [PodClaim(w.key.namespace, w.key.name, w.request, w.priority, w.created) for w in admitted]
    newest_of_a = pods[a_jobs - 1]
    verdict = judge_preemption(quota_tree, PodClaim("user-c", "c", waiting.request, HIGH, 50.0), [newest_of_a],
                               usage(quota_tree, *pods))
    assert reclaimed is allowed
    assert verdict.allowed is allowed, verdict.reason


# The property ---------------------------------------------------------------------------------------------------

SETTINGS = settings(
    max_examples=examples(300), deadline=None, database=None, derandomize=True,
    suppress_health_check=list(HealthCheck),
)


@st.composite
def scenes(draw: st.DrawFn) -> tuple[QuotaTree, list[PodClaim], PodClaim, list[PodClaim]]:
    """A random valid tree, bound pods of random leaves (and of no quota), a preemptor and a set of victims
    drawn from the bound pods (as the scheduler would draw them: lower priority)."""
    quota_tree = draw(quota_trees())
    namespaces = [leaf.namespaces[0] for leaf in quota_tree.leaves()] + ["no-quota"]
    # Mostly a leaf with a guarantee in both resources (the interesting case: it may be owed something).
    owed = [leaf.namespaces[0] for leaf in quota_tree.leaves() if len(leaf.min) >= 2 and all(leaf.min.values())]
    mine = draw(st.sampled_from(owed or namespaces) | st.sampled_from(owed or namespaces)
                | st.sampled_from(namespaces))
    others = [namespace for namespace in namespaces if namespace != mine]
    # Most bound pods elsewhere (so that the preemptor's quota is often within its min and others borrow).
    where = st.sampled_from(others) | st.sampled_from(others) | st.sampled_from(others) | st.just(mine)
    bound = [
        PodClaim(draw(where), f"p{index}", res(cpu=draw(st.integers(0, 6)), memory=draw(st.integers(0, 6))),
                 draw(st.integers(0, 2)), float(index))
        for index in range(draw(st.integers(1, 14)))
    ]
    preemptor = PodClaim(mine, "preemptor", res(cpu=draw(st.integers(0, 2)), memory=draw(st.integers(0, 2))),
                         3, 100.0)
    # Mostly pods of other quotas (the rule's heart), sometimes any of them.
    theirs = [claim for claim in bound if claim.namespace not in (mine, "no-quota")] or bound
    pool = st.sampled_from(theirs) | st.sampled_from(theirs) | st.sampled_from(bound)
    victims = draw(st.lists(pool, min_size=1, max_size=4, unique_by=lambda claim: claim.name))
    return quota_tree, bound, preemptor, victims


TALLY: Counter[str] = Counter()


def _sum(pods: Sequence[PodClaim], quota_tree: QuotaTree, key: str, resource: str) -> int:
    """What ``pods`` hold of ``resource`` in the subtree of node ``key`` (walked pod by pod)."""
    total = 0
    for claim in pods:
        leaf = quota_key(quota_tree, claim.namespace)
        if leaf is not None and key in {node.key for node in quota_tree.chain(leaf)}:
            total += claim.request.get(resource, 0)
    return total


def _common(quota_tree: QuotaTree, first: str, second: str) -> str:
    ancestors = {node.key for node in quota_tree.chain(first)}
    return next(node.key for node in quota_tree.chain(second) if node.key in ancestors)


@SETTINGS
@given(scenes())
def test_no_allowed_victim_set_breaks_a_min_or_a_max(scene: tuple[QuotaTree, list[PodClaim], PodClaim,
                                                                     list[PodClaim]]) -> None:
    quota_tree, bound, preemptor, victims = scene
    verdict = judge_preemption(quota_tree, preemptor, victims, usage(quota_tree, *bound))
    event("allowed" if verdict.allowed else "refused")
    TALLY["allowed" if verdict.allowed else "refused"] += 1
    leaf = quota_key(quota_tree, preemptor.namespace)
    if not verdict.allowed or leaf is None:
        return
    left = [claim for claim in bound if claim not in victims]
    contended = [resource for resource, _ in checked(preemptor.request)]
    # Max: with the victims gone, the preemptor fits max at every level of its chain.
    for level in quota_tree.chain(leaf):
        for resource in contended:
            cap = level.max.get(resource)
            if cap is not None:
                assert _sum(left, quota_tree, level.key, resource) + preemptor.request[resource] <= cap
    for victim in victims:
        victim_leaf = quota_key(quota_tree, victim.namespace)
        if victim_leaf is None:
            continue
        if victim_leaf == leaf:
            # The preemptor's own quota: only where its preempt-policy allows, only lower priorities.
            assert quota_tree.nodes[leaf].attributes.get(PREEMPT_POLICY) == PREEMPT_LOWER_PRIORITY
            assert victim.priority < preemptor.priority
            TALLY["own quota"] += 1
            continue
        # Another quota: it holds something contended, and every level of its quota below the common ancestor
        # keeps its min in each contended resource its victims hold.
        held = [resource for resource in contended if victim.request.get(resource, 0) > 0]
        assert held
        common = _common(quota_tree, leaf, victim_leaf)
        for level in quota_tree.chain(victim_leaf):
            if level.key == common:
                break
            for resource in held:
                floor = level.min.get(resource)
                if floor is not None:
                    assert _sum(left, quota_tree, level.key, resource) >= floor
        TALLY["other quota"] += 1


def test_the_property_reached_allowed_sets_of_both_kinds() -> None:
    # Runs after the property (file order): it must not pass by never allowing anything.
    if not TALLY:
        pytest.skip("the property did not run in this session")
    assert TALLY["allowed"] >= 10, TALLY
    assert TALLY["other quota"] >= 5, TALLY
    assert TALLY["own quota"] >= 1, TALLY


def test_a_loose_preemptor_fits_the_room_jobs_hold_only_once_loose_victims_go() -> None:
    # Held: 40 reserved for Department-a's jobs and 50 of loose pods at the root; a 20 CPU loose pod does not fit.
    a, c = quota_key(TREE, "user-a"), quota_key(TREE, "user-c")
    assert a is not None and c is not None
    reserved: MutableUsage = {}
    loose: MutableUsage = {}
    charge(reserved, TREE, a, res(cpu=40).items())
    charge(loose, TREE, c, res(cpu=50).items())
    wanted = res(cpu=20)
    (blocker,) = held_room_blockers(TREE, a, wanted, (reserved, loose), [])
    assert blocker.explain() == "quota root: cpu request 20 + used 90 > max 100"
    # A loose victim of 10 frees what it needs; one of 5 does not (a job's pod is not passed: it frees nothing).
    assert held_room_blockers(TREE, a, wanted, (reserved, loose), [(c, res(cpu=10))]) == ()
    assert held_room_blockers(TREE, a, wanted, (reserved, loose), [(c, res(cpu=5))]) != ()

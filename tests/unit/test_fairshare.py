"""Fair sharing of the spare (docs/fair-sharing.md): siblings under a fair-sharing parent borrow by weight; the
``min`` guarantees and reclaim are unchanged; the order is deterministic; passes do not loop; a tree without the
attribute decides as before."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import job, node, res, tree
from tests.strategies import examples
from webhook.api.names import FAIR_SHARING_ATTRIBUTE, WEIGHT_ATTRIBUTE
from webhook.core.decide import decide, leaf_policies
from webhook.core.decisions import Decisions, PlainJob
from webhook.core.fairshare import INFINITE, fair_note, fair_parents, share, shares, weights
from webhook.core.queueing import admit_groups, order
from webhook.core.quota import QuotaTree
from webhook.core.quota_attributes import parse_weight
from webhook.core.workload import Phase, Workload

EXAMPLES = examples(150)
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
FAIR = {FAIR_SHARING_ATTRIBUTE: "true"}


@dataclass(frozen=True)
class Scene:
    """A root of ``total`` CPU shared by children (min, weight or None, job size, jobs waiting)."""

    total: int
    children: tuple[tuple[int, int | None, int, int], ...]
    fair: bool = True

    def tree(self, attribute: str = "true") -> QuotaTree:
        kids = []
        for index, (minimum, weight, _, _) in enumerate(self.children):
            attributes = {WEIGHT_ATTRIBUTE: str(weight)} if weight is not None else {}
            kids.append(node(f"c{index}", min=res(cpu=minimum), max=res(cpu=self.total), namespaces=(f"ns{index}",),
                             attributes=attributes))
        root_attributes = {FAIR_SHARING_ATTRIBUTE: attribute} if self.fair else {}
        return tree(node("root", min=res(cpu=self.total), max=res(cpu=self.total), children=kids,
                         attributes=root_attributes))

    def jobs(self) -> list[PlainJob]:
        out = []
        for index, (_, _, size, count) in enumerate(self.children):
            for number in range(count):
                out.append(PlainJob(job(f"j{index}-{number}", f"ns{index}", f"c{index}", cpu=size,
                                        created=float(number * len(self.children) + index))))
        return out


@st.composite
def scenes(draw: st.DrawFn) -> Scene:
    total = draw(st.integers(20, 60))
    count = draw(st.integers(2, 4))
    mins = [draw(st.integers(0, total // (2 * count))) for _ in range(count)]
    children = tuple(
        (minimum, draw(st.none() | st.integers(1, 4)), draw(st.integers(1, 5)), total)  # more than can ever fit
        for minimum in mins
    )
    return Scene(total, children)


def _decide(quota_tree: QuotaTree, jobs: Sequence[PlainJob]) -> Decisions[PlainJob]:
    return decide(quota_tree, jobs, leaf_policies(quota_tree, {}, strict=False), oversell_rate=Fraction(1))


@SETTINGS
@given(scenes())
def test_every_sibling_borrows_within_one_job_of_its_weighted_fair_share(scene: Scene) -> None:
    # From an empty cluster, every sibling asking for more than it can get: after the pass no sibling could
    # have taken the last job another one got at a lower share. For every pair (i, j) where j borrows and i's
    # next job would have fit when j's last one was admitted (the room then was at least what is left now
    # plus j's last job): share of j before its last job <= share of i with its next job.
    quota_tree = scene.tree()
    decisions = _decide(quota_tree, scene.jobs())
    weight = weights(quota_tree)
    root = quota_tree.root
    used = {child.key: decisions.ledger.used(child.key).get_or_zero("cpu") for child in root.children}
    room = res(cpu=scene.total).get_or_zero("cpu") - sum(used.values())
    for j, child_j in enumerate(root.children):
        size_j = res(cpu=scene.children[j][2]).get_or_zero("cpu")
        if used[child_j.key] <= child_j.min.get_or_zero("cpu"):
            continue
        before = share(root, child_j, weight[child_j.key], {"cpu": used[child_j.key] - size_j})
        for i, child_i in enumerate(root.children):
            if i == j:
                continue
            size_i = res(cpu=scene.children[i][2]).get_or_zero("cpu")
            if size_i > room + size_j:
                continue  # it may not have fit then: the room went to whoever it fitted
            after = share(root, child_i, weight[child_i.key], {"cpu": used[child_i.key] + size_i})
            assert before <= after, (child_j.name, before, child_i.name, after, used)


@SETTINGS
@given(scenes(), st.randoms(use_true_random=False))
def test_the_order_is_deterministic(scene: Scene, rng: random.Random) -> None:
    quota_tree = scene.tree()
    jobs = scene.jobs()
    shuffled = list(jobs)
    rng.shuffle(shuffled)
    first, second = _decide(quota_tree, jobs), _decide(quota_tree, shuffled)
    assert [j.workload.key for j in first.admissions] == [j.workload.key for j in second.admissions]
    assert dict(first.positions) == dict(second.positions)


@SETTINGS
@given(scenes())
def test_a_parent_without_fair_sharing_decides_as_before(scene: Scene) -> None:
    jobs = [plain.workload for plain in scene.jobs()]
    groups: dict[str, list[Workload]] = {}
    for workload in jobs:
        groups.setdefault(workload.quota.lower(), []).append(workload)
    groups = {key: order(members) for key, members in groups.items()}
    for attribute in ("false", "False"):
        off = scene.tree(attribute)
        assert not fair_parents(off)
        unfair = replace(scene, fair=False).tree()
        got = admit_groups(off, {}, groups, {}, 1)[0]
        want = admit_groups(unfair, {}, groups, {}, 1)[0]
        assert [w.key for w in got.admitted] == [w.key for w in want.admitted]
    decided = _decide(scene.tree("false"), scene.jobs())
    plain = _decide(replace(scene, fair=False).tree(), scene.jobs())
    assert [j.workload.key for j in decided.admissions] == [j.workload.key for j in plain.admissions]


@st.composite
def borrowed_scenes(draw: st.DrawFn) -> tuple[Scene, list[PlainJob]]:
    """Some children run jobs (borrowing, perhaps), others wait with jobs within their ``min``."""
    scene = draw(scenes())
    jobs: list[PlainJob] = []
    clock = 0.0
    for index, (_, _, size, _) in enumerate(scene.children):
        running = draw(st.integers(0, scene.total // max(size, 1)))
        for number in range(running):
            clock += 1
            jobs.append(PlainJob(job(f"r{index}-{number}", f"ns{index}", f"c{index}", cpu=size, created=clock,
                                     phase=Phase.ADMITTED, admitted_at=clock)))
        for number in range(draw(st.integers(0, 4))):
            clock += 1
            jobs.append(PlainJob(job(f"w{index}-{number}", f"ns{index}", f"c{index}", cpu=size, created=clock)))
    return scene, jobs


OWED = Counter[str]()


def _apply(jobs: list[PlainJob], decisions: Decisions[PlainJob]) -> tuple[list[PlainJob], Counter[str]]:
    """The jobs once a pass's decisions are written: admitted ones run, evicted ones wait."""
    admitted = {j.workload.key for j in (*decisions.admissions, *decisions.late_admissions)}
    admitted.update(plan.preemptor.workload.key for plan in decisions.reclaims)
    evicted = Counter(str(victim.workload.key) for plan in decisions.reclaims for victim in plan.victims)
    out = []
    for plain in jobs:
        key = plain.workload.key
        if key in admitted:
            out.append(replace(plain, workload=replace(plain.workload, phase=Phase.ADMITTED, admitted_at=100.0)))
        elif str(key) in evicted:
            out.append(replace(plain, workload=replace(plain.workload, phase=Phase.QUEUED, admitted_at=None)))
        else:
            out.append(plain)
    return out, evicted


@SETTINGS
@given(borrowed_scenes())
def test_fair_sharing_keeps_every_min_and_its_passes_settle_without_ping_pong(
    case: tuple[Scene, list[PlainJob]],
) -> None:
    scene, jobs = case
    quota_tree = scene.tree()
    # A waiting job the plain pass admits or reclaims for while within its min: the fair pass does too.
    plain_tree = replace(scene, fair=False).tree()
    plain, fair = _decide(plain_tree, jobs), _decide(quota_tree, jobs)
    served = {j.workload.key for j in (*fair.admissions, *fair.late_admissions)}
    served.update(plan.preemptor.workload.key for plan in fair.reclaims)
    for served_plain in (*plain.admissions, *plain.late_admissions, *(p.preemptor for p in plain.reclaims)):
        workload = served_plain.workload
        used_before = {child.key: sum(j.workload.request.get_or_zero("cpu") for j in jobs
                                      if j.workload.phase is Phase.ADMITTED and j.workload.quota == child.name)
                       for child in quota_tree.root.children}
        child = quota_tree.nodes[workload.quota.lower()]
        within = used_before[child.key] + workload.request.get_or_zero("cpu") <= child.min.get_or_zero("cpu")
        if within:
            OWED["checked"] += 1
            assert workload.key in served, f"{workload.key} is owed its min but waits under fair sharing"
    # Passes over the same snapshot settle, and no job is evicted twice (no eviction ping-pong).
    current, evictions = jobs, Counter[str]()
    for _ in range(30):
        decisions = _decide(quota_tree, current)
        if not (decisions.admissions or decisions.reclaims or decisions.late_admissions):
            break
        current, evicted = _apply(current, decisions)
        evictions.update(evicted)
    else:
        raise AssertionError("the passes did not settle")
    assert all(count == 1 for count in evictions.values()), evictions


def test_the_min_property_reached_jobs_owed_their_min() -> None:
    # Runs after the property (same module, in order): it must not pass by never checking a job owed its min.
    # About one example in four has a job owed its min (9 of the 37 examples under `make check`).
    if not OWED:
        test_fair_sharing_keeps_every_min_and_its_passes_settle_without_ping_pong()
    assert OWED["checked"] >= EXAMPLES // 8, OWED


def test_the_seed_tree_shares_the_spare_as_the_mins() -> None:
    # Department-a (min 60) and Department-b (min 40) under a fair root of 100 CPU, each with 100 jobs of 1 CPU:
    # Department-a's burst came first, but the spare (nothing here: the mins fill the root) ... with mins of
    # 30 and 20 the spare of 50 goes 30 : 20.
    scene = Scene(100, ((30, None, 1, 100), (20, None, 1, 100)))
    decisions = _decide(scene.tree(), scene.jobs())
    used = [decisions.ledger.used(f"c{i}").get_or_zero("cpu") for i in range(2)]
    assert used == [res(cpu=60).get_or_zero("cpu"), res(cpu=40).get_or_zero("cpu")]
    # Without fair sharing the one whose jobs came first takes the spare as they alternate by time: 50 : 50.
    plain = _decide(replace(scene, fair=False).tree(), scene.jobs())
    assert [plain.ledger.used(f"c{i}").get_or_zero("cpu") for i in range(2)] == [res(cpu=50).get_or_zero("cpu")] * 2


def test_weights_shares_and_their_edges() -> None:
    scene = Scene(100, ((30, None, 1, 0), (0, None, 1, 0), (10, 3, 1, 0)))
    quota_tree = scene.tree()
    weight = weights(quota_tree)
    assert weight == {"c0": Fraction(30, 100), "c1": Fraction(0), "c2": Fraction(3)}
    root, (c0, c1, _) = quota_tree.root, quota_tree.root.children
    assert share(root, c0, weight["c0"], {"cpu": res(cpu=60).get_or_zero("cpu")}) == Fraction(1)
    assert share(root, c1, weight["c1"], {"cpu": res(cpu=1).get_or_zero("cpu")}) == INFINITE
    assert share(root, c1, weight["c1"], {}) == 0
    assert shares(quota_tree, {"c0": res(cpu=40)})["c0"] == Fraction(10, 30)
    assert parse_weight("3/2") == Fraction(3, 2) and parse_weight("0") is None and parse_weight("x") is None
    no_min = tree(node("root", min=res(cpu=10), max=res(cpu=10), children=(
        node("dept", max=res(cpu=10), attributes=FAIR, children=(node("a", max=res(cpu=10), namespaces=("a",)),)),
    )))
    assert weights(no_min) == {"a": Fraction(1)}  # a parent without a min: every child weighs 1


def test_a_block_queue_stops_at_its_first_miss_and_unknown_quotas_wait() -> None:
    quota_tree = Scene(10, ((0, None, 1, 0), (0, None, 1, 0))).tree()
    jobs = [job("big", "ns0", "c0", cpu=20, created=0.0), job("small", "ns0", "c0", cpu=1, created=1.0),
            job("other", "ns1", "c1", cpu=1, created=2.0), job("lost", "nsx", "cx", cpu=1, created=3.0)]
    groups: Mapping[str, list[Workload]] = {"c0": jobs[:2], "c1": [jobs[2]], "cx": [jobs[3]]}
    from webhook.core.fairshare import fair_admit_groups  # noqa: PLC0415
    from webhook.core.queueing import Policy  # noqa: PLC0415

    result, _ = fair_admit_groups(quota_tree, {}, groups, {"c0": Policy.BLOCK}, 1)
    assert [w.key.name for w in result.admitted] == ["other"]
    assert result.positions[jobs[1].key] == 2
    assert result.reasons[jobs[1].key].blocked_behind == jobs[0].key
    assert "not in the ElasticQuotaTree" in result.reasons[jobs[3].key].explain()


def test_kq_why_says_who_goes_first_for_the_spare() -> None:
    quota_tree = Scene(100, ((30, None, 1, 0), (20, None, 1, 0))).tree()
    used = {"c0": res(cpu=50), "c1": res(cpu=20), "root": res(cpu=70)}
    above = fair_note(quota_tree, used, "c0")
    assert "root/c0 borrows at share 0.67, above root/c1 (0.00), whose jobs go first" in above
    below = fair_note(quota_tree, used, "c1")
    assert "root/c1 borrows at share 0.00, at or below its siblings': its jobs go first" in below
    assert fair_note(replace(Scene(10, ((0, None, 1, 0),)), fair=False).tree(), {}, "c0") == ""


def test_kq_top_quota_shows_each_childs_share_beside_its_fair_part() -> None:
    from webhook.readmodel.queues import fair_lines  # noqa: PLC0415 - the CLI's formatting of the same numbers
    from webhook.readmodel.usage import NodeUsage  # noqa: PLC0415

    quota_tree = Scene(100, ((30, None, 1, 0), (20, None, 1, 0))).tree()
    usages = [NodeUsage(quota_tree.nodes[key], 1, (False,), used, used)
              for key, used in (("c0", res(cpu=45)), ("c1", res(cpu=20)))]
    (line,) = fair_lines(quota_tree, usages)
    assert line == ("fair sharing under root: c0 borrows at share 0.50, fair part of the spare 60%; "
                    "c1 borrows at share 0.00, fair part of the spare 40%")
    assert fair_lines(replace(Scene(10, ((0, None, 1, 0),)), fair=False).tree(), []) == []

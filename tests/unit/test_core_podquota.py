"""Pod-level quota: which quota a pod counts against, and every level and resource it would overrun."""

from __future__ import annotations

from tests.builders import node, res, tree
from webhook.core.podquota import QuotaBlocker, explain_blockers, pod_quota_blockers, quota_key

GI = 1024**3 * 10**9  # nano-units
CPU = 10**9

TREE = tree(
    node(
        "root",
        min=res(cpu=100, memory="100Gi"),
        max=res(cpu=100, memory="100Gi"),
        children=(
            node("Dept", max=res(cpu=60), children=(node("Team", max=res(cpu=40, memory="10Gi"), namespaces=("t",)),)),
            node("Other", max=res(cpu=100), namespaces=("o",)),
        ),
    )
)


def test_a_pod_counts_against_the_leaf_that_lists_its_namespace_now() -> None:
    # The controller's rule (docs/accounting.md): a moved namespace takes its pods along, and a pod cannot
    # charge another department by carrying its quota label.
    assert quota_key(TREE, "t") == "team"
    assert quota_key(TREE, "o") == "other"
    assert quota_key(TREE, "free") is None
    assert quota_key(None, "t") is None


def test_nothing_blocks_within_every_max() -> None:
    assert pod_quota_blockers(TREE, "team", res(cpu=40)) == ()


def test_every_overrun_level_is_listed_leaf_first() -> None:
    used = {"team": {"cpu": 30 * CPU}, "dept": {"cpu": 55 * CPU}, "root": {"cpu": 55 * CPU}}
    blockers = pod_quota_blockers(TREE, "team", res(cpu=20), used)
    assert blockers == (
        QuotaBlocker("root/Dept/Team", "cpu", 20 * CPU, 30 * CPU, 40 * CPU),
        QuotaBlocker("root/Dept", "cpu", 20 * CPU, 55 * CPU, 60 * CPU),
    )
    assert explain_blockers(blockers) == (
        "pod-level quota (bound and placed pods): quota root/Dept/Team: cpu request 20 + used 30 > max 40; "
        "quota root/Dept: cpu request 20 + used 55 > max 60"
    )


def test_several_usages_add_up() -> None:
    bound = {"team": {"memory": 6 * GI}}
    placed = {"team": {"memory": 3 * GI}}
    blockers = pod_quota_blockers(TREE, "team", res(memory="2Gi"), bound, placed)
    assert [b.explain() for b in blockers] == ["quota root/Dept/Team: memory request 2Gi + used 9Gi > max 10Gi"]


def test_resources_missing_from_max_are_unlimited_and_max_jobs_is_never_a_pod_resource() -> None:
    assert pod_quota_blockers(TREE, "team", res(gpu=100, max_jobs=99)) == ()


def test_a_pod_bigger_than_the_max_says_so() -> None:
    (blocker,) = pod_quota_blockers(TREE, "other", res(cpu=101))[:1]
    assert blocker.explain().endswith("(the pod alone is over the max)")

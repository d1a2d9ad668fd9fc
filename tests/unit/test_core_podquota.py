"""Pod-level quota: which quota a pod counts against, what its pods use up the chain, and every level and
resource one more pod would overrun."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import node, res, tree
from tests.strategies import examples
from webhook.api.names import MAX_JOBS
from webhook.core.podquota import QuotaBlocker, charge, explain_blockers, pod_quota_blockers, quota_key
from webhook.core.quota import QuotaTree
from webhook.core.resources import Resources

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


# Charging usage up the chain ---------------------------------------------------------------------------------


def test_a_charge_counts_at_the_leaf_and_every_ancestor_and_an_uncharge_leaves_no_trace() -> None:
    usage: dict[str, dict[str, int]] = {}
    charge(usage, TREE, "Team", res(cpu=3, memory="1Gi").items())
    charge(usage, TREE, "other", [("cpu", 2 * CPU)])
    assert usage == {
        "team": {"cpu": 3 * CPU, "memory": GI},
        "dept": {"cpu": 3 * CPU, "memory": GI},
        "root": {"cpu": 5 * CPU, "memory": GI},
        "other": {"cpu": 2 * CPU},
    }
    charge(usage, TREE, "team", res(cpu=3, memory="1Gi").items(), -1)
    assert usage == {"team": {}, "dept": {}, "root": {"cpu": 2 * CPU}, "other": {"cpu": 2 * CPU}}


def test_the_first_blocker_in_the_request_s_own_order() -> None:
    used = {"team": {"cpu": 40 * CPU, "memory": 10 * GI}}
    request = Resources({"memory": GI, "cpu": CPU})
    by_name = pod_quota_blockers(TREE, "team", request, used)
    assert [blocker.resource for blocker in by_name] == ["cpu", "memory"]
    (first,) = pod_quota_blockers(TREE, "team", request, used, by_name=False, first=True)
    assert first.resource == "memory"
    assert pod_quota_blockers(TREE, "team", request, by_name=False, first=True) == ()


# Property: the check agrees with a count from scratch -------------------------------------------------------

RESOURCES = ("cpu", "memory", "nvidia.com/gpu")


@st.composite
def quota_trees(draw: st.DrawFn) -> QuotaTree:
    """Two or three levels; every node caps a random subset of the resources (others unlimited there), a
    child never above its parent."""

    def caps(parent: Resources) -> Resources:
        names = draw(st.lists(st.sampled_from(RESOURCES), unique=True, max_size=3))
        return Resources({name: draw(st.integers(0, parent.get(name, 12 * CPU) // CPU)) * CPU for name in names})

    total = caps(Resources())
    departments = []
    for d in range(draw(st.integers(1, 3))):
        limit = caps(total)
        if draw(st.booleans()):
            departments.append(node(f"D{d}", max=limit, namespaces=(f"ns-d{d}",)))
            continue
        teams = [
            node(f"D{d}T{t}", max=caps(limit), namespaces=(f"ns-d{d}t{t}",)) for t in range(draw(st.integers(1, 3)))
        ]
        departments.append(node(f"D{d}", max=limit, children=teams))
    return tree(node("Root", min=total, max=total, children=departments))


@st.composite
def requests(draw: st.DrawFn) -> Resources:
    names = draw(st.lists(st.sampled_from((*RESOURCES, MAX_JOBS)), unique=True, max_size=4))
    return Resources({name: draw(st.integers(-1, 6)) * CPU for name in names})


def from_scratch(
    quota_tree: QuotaTree, leaf: str, request: Resources, pods: list[tuple[str, Resources]]
) -> tuple[QuotaBlocker, ...]:
    """The rule read literally: at the leaf and each ancestor, every pod below adds up, then each checked
    resource (positive, not the job count) must stay within that node's max where it has one."""
    out = []
    node_key: str | None = leaf.lower()
    while node_key is not None:
        here = quota_tree.nodes[node_key]
        depth = len(here.path)
        below = [amounts for pod_leaf, amounts in pods if quota_tree.nodes[pod_leaf].path[:depth] == here.path]
        for name in sorted(request):
            amount = request[name]
            if amount <= 0 or name == MAX_JOBS or name not in here.max:
                continue
            used = sum(amounts.get_or_zero(name) for amounts in below)
            if used + amount > here.max[name]:
                out.append(QuotaBlocker(here.full_name, name, amount, used, here.max[name]))
        node_key = quota_tree.parents[node_key]
    return tuple(out)


@settings(max_examples=examples(200), deadline=None, database=None)
@given(data=st.data())
def test_the_check_agrees_with_a_count_from_scratch(data: st.DataObject) -> None:
    quota_tree = data.draw(quota_trees())
    leaves = [leaf.key for leaf in quota_tree.leaves()]
    bound: dict[str, dict[str, int]] = {}
    placed: dict[str, dict[str, int]] = {}
    live: list[tuple[str, Resources]] = []
    for _ in range(data.draw(st.integers(0, 12))):
        leaf, amounts, usage = data.draw(st.sampled_from(leaves)), data.draw(requests()), data.draw(
            st.sampled_from((bound, placed))
        )
        charge(usage, quota_tree, leaf, amounts.items())
        if data.draw(st.integers(0, 3)):
            live.append((leaf, amounts))
        else:  # the pod left again: bound and deleted, or its placement dropped
            charge(usage, quota_tree, leaf, amounts.items(), -1)
    leaf, request = data.draw(st.sampled_from(leaves)), data.draw(requests())
    expected = from_scratch(quota_tree, leaf, request, live)
    assert pod_quota_blockers(quota_tree, leaf, request, bound, placed) == expected
    assert pod_quota_blockers(quota_tree, leaf, request, placed, bound, first=True) == expected[:1]
    assert all(amount for usage in (bound, placed) for sums in usage.values() for amount in sums.values())

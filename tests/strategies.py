"""Hypothesis strategies shared by the property tests: valid quota trees, workloads, whole scenarios."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st

from tests.builders import job, node, res, tree
from webhook.core.queueing import Policy
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY, QuotaNode, QuotaTree
from webhook.core.workload import Workload

FULL_PROFILE_EXAMPLES = 100
"""Hypothesis's default ``max_examples``: the count the default profile (``make test``, CI) runs."""


def examples(full: int) -> int:
    """``full`` examples under the default profile, scaled down with the active profile's ``max_examples``
    (a quarter under ``make check``'s ``--hypothesis-profile=check``, see tests/conftest.py), never below 10.

    Read when a test module is imported, after pytest has loaded the profile."""
    active = settings.default
    assert active is not None  # hypothesis loads its default profile on import
    return max(10, full * active.max_examples // FULL_PROFILE_EXAMPLES)


@st.composite
def quota_trees(draw: st.DrawFn) -> QuotaTree:
    """Valid trees of two or three levels over cpu and memory, some leaves with a job cap or preemption."""
    cpu, memory = draw(st.integers(2, 30)), draw(st.integers(2, 30))
    total = res(cpu=cpu, memory=memory)

    def leaf(name: str, min_cpu: int, min_mem: int, cap_cpu: int, cap_mem: int) -> QuotaNode:
        max_cpu = draw(st.just(cap_cpu) | st.integers(max(min_cpu, 1), cap_cpu))
        max_mem = draw(st.just(cap_mem) | st.integers(max(min_mem, 1), cap_mem))
        jobs_cap = draw(st.sampled_from([None, None, None, 1, 2, 4]))
        limits = res(cpu=max_cpu, memory=max_mem) + ({} if jobs_cap is None else res(max_jobs=jobs_cap))
        preempt = draw(st.booleans())
        return node(
            name,
            min=res(cpu=min_cpu, memory=min_mem),
            max=limits,
            namespaces=(f"ns-{name}",),
            attributes={PREEMPT_POLICY: PREEMPT_LOWER_PRIORITY} if preempt else None,
        )

    children: list[QuotaNode] = []
    left_cpu, left_mem = cpu, memory
    for d in range(draw(st.integers(1, 3))):
        min_cpu = draw(st.integers(0, left_cpu) | st.just(left_cpu // 2))
        min_mem = draw(st.integers(0, left_mem) | st.just(left_mem // 2))
        left_cpu, left_mem = left_cpu - min_cpu, left_mem - min_mem
        if draw(st.booleans()):
            children.append(leaf(f"d{d}", min_cpu, min_mem, cpu, memory))
            continue
        max_cpu = draw(st.just(cpu) | st.integers(max(min_cpu, 1), cpu))
        max_mem = draw(st.just(memory) | st.integers(max(min_mem, 1), memory))
        teams: list[QuotaNode] = []
        team_cpu, team_mem = min_cpu, min_mem
        for t in range(draw(st.integers(1, 2))):
            t_cpu, t_mem = draw(st.integers(0, team_cpu)), draw(st.integers(0, team_mem))
            team_cpu, team_mem = team_cpu - t_cpu, team_mem - t_mem
            teams.append(leaf(f"d{d}t{t}", t_cpu, t_mem, max_cpu, max_mem))
        children.append(
            node(f"d{d}", min=res(cpu=min_cpu, memory=min_mem), max=res(cpu=max_cpu, memory=max_mem),
                 children=teams)
        )
    return tree(node("root", min=total, max=total, children=children))


@st.composite
def workloads(draw: st.DrawFn, quota_tree: QuotaTree, max_size: int = 24) -> list[Workload]:
    leaves = quota_tree.leaves()
    cpu_cap = quota_tree.root.max["cpu"] // 10**9
    mem_cap = quota_tree.root.max["memory"] // 10**9
    out = []
    for index in range(draw(st.integers(0, max_size))):
        leaf = draw(st.sampled_from(leaves))
        out.append(
            job(
                f"j{index}",
                namespace=leaf.namespaces[0],
                quota=leaf.key,
                pods=draw(st.integers(1, 2)),
                cpu=draw(st.integers(0, cpu_cap // 2 + 1)),
                memory=draw(st.integers(0, mem_cap // 2 + 1)),
                priority=draw(st.integers(0, 3)),
                created=float(draw(st.integers(0, 8))),
            )
        )
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[QuotaTree, list[Workload], dict[str, Policy]]:
    quota_tree = draw(quota_trees())
    policies = {leaf.key: draw(st.sampled_from(Policy)) for leaf in quota_tree.leaves()}
    return quota_tree, draw(workloads(quota_tree)), policies

"""Repeated pairs of the held and the raw release shape in one run, in alternating order (a report).

On this shared 2-core machine one pair of the two shapes swings by tens of percent, and the five shapes of
:mod:`bench.e2e_bench` always run raw release first, on the lighter cluster. ``--pairs N`` adds N pairs after
them, each on namespaces of its own: pair ``i`` runs held first when ``i`` is odd, raw first when it is even,
and waits for the pods of each shape to run before the next. The held Jobs wait in a leaf of their own
(``pair-<i>``, min 0, capped at ``kube-queue/max-jobs: 0``, added to the tree for the pair) until the cap is
lifted. A pair's ratio is held / raw of that pair; the report lists every pair and the median.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from bench import e2e_shapes
from webhook.kube.client import KubeClient, ResourceRef

NAMESPACES = ResourceRef("", "v1", "namespaces")
FIRST_PAIR_CHILD = 2
"""The tree of :func:`bench.e2e_bench.tree` has two leaves; pair ``i``'s leaf is child ``FIRST_PAIR_CHILD + i - 1``."""


def namespaces(index: int) -> tuple[str, str]:
    """``(held, raw)`` namespaces of pair ``index``."""
    return f"bench-pair-{index}", f"bench-pair-raw-{index}"


def leaf(index: int, total: dict[str, str]) -> dict[str, Any]:
    return {"name": f"pair-{index}", "min": dict.fromkeys(total, "0"),
            "max": {**total, "kube-queue/max-jobs": 0}, "namespaces": [namespaces(index)[0]]}


async def run_pair(client: KubeClient, index: int, *, trees: ResourceRef, tree_name: str, count: int,
                   in_flight: int, total: dict[str, str]) -> dict[str, Any]:
    """Pair ``index``: prepare both shapes, then run them in this pair's order; held and raw figures."""
    held, raw = namespaces(index)
    await client.json_patch(trees, tree_name, [{"op": "add", "path": "/spec/root/children/-",
                                                "value": leaf(index, total)}])
    for namespace in (held, raw):
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await e2e_shapes.namespaces_ready(client, (held,), (raw,))
    await e2e_shapes.create_all(client, [e2e_shapes.job(number, held) for number in range(count)], held)
    await e2e_shapes.all_suspended(client, held, count)
    await e2e_shapes.raw_prepare(client, raw, count)
    child = FIRST_PAIR_CHILD + index - 1

    async def lift() -> None:
        patch = [{"op": "replace", "path": f"/spec/root/children/{child}/max/kube-queue~1max-jobs", "value": count * 2}]
        await client.json_patch(trees, tree_name, patch)

    order = ("held", "raw") if index % 2 else ("raw", "held")
    out: dict[str, Any] = {"order": order}
    for shape in order:
        print(f"e2e bench: pair {index}, {shape} ...", file=sys.stderr)
        if shape == "held":
            out["held"] = await e2e_shapes.held_release(client, held, count, lift)
            await e2e_shapes.pods_running(client, held, count)
        else:
            out["raw"] = await e2e_shapes.raw_release(client, raw, count, in_flight)
            await e2e_shapes.pods_running(client, raw, count)
    return out


def ratio(pair: dict[str, Any]) -> float:
    raw = float(pair["raw"]["sustained_per_second"])
    return float(pair["held"]["sustained_per_second"]) / raw if raw > 0 else float("nan")


def report_lines(pairs: list[dict[str, Any]]) -> list[str]:
    """The pairs' table and their median ratio (nothing without pairs)."""
    if not pairs:
        return []
    lines = [
        f"Repeated pairs (`--pairs {len(pairs)}`), after the five shapes, each on namespaces of its own, in "
        "alternating order (odd pairs held first, even pairs raw first): sustained releases, held / raw of the "
        "same pair.",
        "",
        "| pair | order | held | raw release | held / raw |",
        "|---:|---|---:|---:|---:|",
    ]
    for number, pair in enumerate(pairs, start=1):
        lines.append(f"| {number} | {', then '.join(pair['order'])} | {pair['held']['sustained_per_second']:.1f} /s | "
                     f"{pair['raw']['sustained_per_second']:.1f} /s | {100 * ratio(pair):.0f} % |")
    lines += ["", f"Median of the pairs' ratios: **{100 * statistics.median(ratio(pair) for pair in pairs):.0f} %** "
                  "(goal of issue 23: at least 90 %).", ""]
    return lines

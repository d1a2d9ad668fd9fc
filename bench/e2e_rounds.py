"""Repeated rounds of the held, the replayed and the raw release shape in one run, in rotating order (a report).

On this shared 2-core machine one run of a shape swings by tens of percent, and the five shapes of
:mod:`bench.e2e_bench` always run raw release first, on the lighter cluster. ``--rounds N`` adds N rounds after
them, each on namespaces of its own. Round ``i`` runs the three shapes in the order of :data:`SHAPES` rotated
by ``i - 1``; it waits for the pods of each shape to run, then for the machine to be quiet, before the next
(:func:`bench.e2e_shapes.settled`):

* **held**: Jobs wait in a leaf of their own (``round-<i>``, min 0, capped at ``kube-queue/max-jobs: 0``,
  added to the tree for the round) until the cap is lifted and the controller releases them;
* **replay**: Jobs held the same way in a second leaf (``replay-<i>``), released by the bench with the patch
  the controller would write, under the controller's identity (:func:`bench.e2e_shapes.replay_release`): every
  cost of the admission path in the API server (the tagged objects, the webhooks' conditions, the pods'
  webhook) without the controller;
* **raw**: suspended Jobs outside the tree, one merge patch each (the physical limit of issue 23).

So ``replay / raw`` is what the admission path costs, ``held / replay`` what the controller costs, and
``held / raw`` their product, the figure of issue 23's goal. The report lists every round and the medians.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Mapping
from typing import Any

from bench import e2e_shapes
from webhook.kube.client import KubeClient, ResourceRef

NAMESPACES = ResourceRef("", "v1", "namespaces")
SHAPES = ("held", "replay", "raw")
FIRST_ROUND_CHILD = 2
"""The tree of :func:`bench.e2e_bench.tree` has two leaves; round ``i``'s leaves are the children
``FIRST_ROUND_CHILD + 2 (i - 1)`` (held) and the one after it (replay)."""


def namespaces(index: int) -> tuple[str, str, str]:
    """``(held, replay, raw)`` namespaces of round ``index``."""
    return f"bench-round-{index}", f"bench-replay-{index}", f"bench-round-raw-{index}"


def order(index: int) -> tuple[str, ...]:
    """The shapes of round ``index`` (from 1) in the order they run: :data:`SHAPES` rotated by ``index - 1``."""
    shift = (index - 1) % len(SHAPES)
    return SHAPES[shift:] + SHAPES[:shift]


def leaf(name: str, namespace: str, total: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "min": dict.fromkeys(total, "0"), "max": {**total, "kube-queue/max-jobs": 0},
            "namespaces": [namespace]}


async def run_round(client: KubeClient, controller: KubeClient, index: int, *, trees: ResourceRef, tree_name: str,
                    count: int, in_flight: int, total: dict[str, str],
                    cpu: Callable[[], Mapping[str, float]]) -> dict[str, Any]:
    """Round ``index``: prepare the three shapes, then run them in this round's order; each shape's figures.
    ``controller`` is a client under the controller's identity (for the replay); ``cpu`` gives the CPU seconds
    of the cluster's processes so far (:func:`bench.e2e_metrics.cpu_seconds`)."""
    held, replay, raw = namespaces(index)
    await client.json_patch(trees, tree_name, [
        {"op": "add", "path": "/spec/root/children/-", "value": leaf(f"round-{index}", held, total)},
        {"op": "add", "path": "/spec/root/children/-", "value": leaf(f"replay-{index}", replay, total)}])
    for namespace in (held, replay, raw):
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await e2e_shapes.namespaces_ready(client, (held, replay), (raw,))
    for namespace in (held, replay):
        await e2e_shapes.create_all(client, [e2e_shapes.job(number, namespace) for number in range(count)], namespace)
        await e2e_shapes.all_suspended(client, namespace, count)
    await e2e_shapes.raw_prepare(client, raw, count)
    child = FIRST_ROUND_CHILD + 2 * (index - 1)

    async def lift() -> None:
        patch = [{"op": "replace", "path": f"/spec/root/children/{child}/max/kube-queue~1max-jobs", "value": count * 2}]
        await client.json_patch(trees, tree_name, patch)

    out: dict[str, Any] = {"order": order(index)}
    for shape in out["order"]:
        quiet = await e2e_shapes.settled()
        print(f"e2e bench: round {index}, {shape} (machine quiet after {quiet:.1f} s) ...", file=sys.stderr)
        before = cpu()
        if shape == "held":
            out["held"] = await e2e_shapes.held_release(client, held, count, lift)
        elif shape == "replay":
            tree_spec = (await client.request("GET", trees.path(tree_name)))["spec"]
            out["replay"] = await e2e_shapes.replay_release(client, controller, tree_spec, replay, count=count,
                                                                in_flight=in_flight)
        else:
            out["raw"] = await e2e_shapes.raw_release(client, raw, count, in_flight)
        await e2e_shapes.pods_running(client, {"held": held, "replay": replay, "raw": raw}[shape], count)
        after = cpu()
        out[shape]["cpu_ms"] = {name: (after[name] - before.get(name, 0.0)) * 1000 / count
                                for name in CPU_SHOWN if name in after}
    return out


def rate(one: dict[str, Any], shape: str) -> float:
    return float(one[shape]["sustained_per_second"])


def ratio(one: dict[str, Any], top: str, bottom: str) -> float:
    below = rate(one, bottom)
    return rate(one, top) / below if below > 0 else float("nan")


RATIOS = (("held", "raw"), ("replay", "raw"), ("held", "replay"))
CPU_SHOWN = ("kq-serve", "kube-apiserver")
"""The processes whose CPU per release the rounds report (from each shape's start to its pods running)."""


def _cpu_lines(rounds: list[dict[str, Any]]) -> list[str]:
    if not all("cpu_ms" in one[shape] for one in rounds for shape in SHAPES):
        return []
    header = " | ".join(f"{name} {shape}" for name in CPU_SHOWN for shape in SHAPES)
    lines = [f"CPU ms per release, from the start of each shape to its pods running (the rounds add {len(SHAPES)} "
             "namespaces of jobs each, so later rounds run beside more jobs):", "",
             f"| round | {header} |", "|---:|" + "---:|" * len(CPU_SHOWN) * len(SHAPES)]
    for number, one in enumerate(rounds, start=1):
        cells = " | ".join(f"{one[shape]['cpu_ms'].get(name, float('nan')):.1f}" for name in CPU_SHOWN
                           for shape in SHAPES)
        lines.append(f"| {number} | {cells} |")
    return [*lines, ""]


def report_lines(rounds: list[dict[str, Any]]) -> list[str]:
    """The rounds' table and their medians (nothing without rounds)."""
    if not rounds:
        return []
    lines = [
        f"Repeated rounds (`--rounds {len(rounds)}`), after the five shapes, each on namespaces of its own, the "
        "three shapes in rotating order: sustained releases of held (the controller), replay (the controller's "
        "patches sent by the bench: the admission path without the controller) and raw release, and their "
        "ratios in the same round.",
        "",
        "| round | order | held | replay | raw release | held / raw | replay / raw | held / replay |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for number, one in enumerate(rounds, start=1):
        cells = [f"{rate(one, shape):.1f} /s" for shape in SHAPES]
        shares = [f"{100 * ratio(one, top, bottom):.0f} %" for top, bottom in RATIOS]
        lines.append(f"| {number} | {', '.join(one['order'])} | {' | '.join(cells)} | {' | '.join(shares)} |")
    medians = [f"{100 * statistics.median(ratio(one, top, bottom) for one in rounds):.0f} %" for top, bottom in RATIOS]
    lines += [
        f"| **median** | | | | | **{medians[0]}** | {medians[1]} | {medians[2]} |",
        "",
        f"Median of held / raw: **{medians[0]}** (goal of issue 23: at least 90 %); of it, the admission path "
        f"keeps {medians[1]} (replay / raw) and the controller {medians[2]} (held / replay).",
        "",
        *_cpu_lines(rounds),
    ]
    return lines

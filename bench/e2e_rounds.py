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

``--split`` adds two replays to each round, each in a namespace that one webhook of the admission path skips
(the bench adds a ``DoesNotExist`` expression on a label of its own to that webhook's namespace selector, on
its own cluster only): **no update check** (``jobs.validate`` is not asked, so its condition is not evaluated
on the release) and **no pod webhook** (``pods.mutate`` is not asked, so the pods carry no extender marker
and the scheduler does not call the extender either). What each guarantee costs is then its replay beside the
full one, in the same round.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Mapping
from typing import Any

from bench import e2e_shapes
from webhook.admission.configs import JOBS_VALIDATE, PODS_MUTATE
from webhook.api.objects import mapping, mappings, name_of, spec_of
from webhook.kube.client import KubeClient, ResourceRef

NAMESPACES = ResourceRef("", "v1", "namespaces")
SHAPES = ("held", "replay", "raw")
SPLIT_SHAPES = ("no_check", "no_pod_hook")
"""The replays ``--split`` adds, each in a namespace one webhook skips (:data:`SKIPPED`)."""
REPLAYS = ("replay", *SPLIT_SHAPES)
TITLES = {"held": "held", "replay": "replay", "raw": "raw", "no_check": "no update check",
          "no_pod_hook": "no pod webhook"}
SKIPPED = {
    "no_check": ("validatingwebhookconfigurations", JOBS_VALIDATE, "bench.kube-queue.x-k8s.io/skip-jobs-validate"),
    "no_pod_hook": ("mutatingwebhookconfigurations", PODS_MUTATE, "bench.kube-queue.x-k8s.io/skip-pods-mutate"),
}
"""Split shape -> (configuration resource, webhook, the namespace label that webhook skips on the bench's cluster)."""
FIRST_ROUND_CHILD = 2
"""The tree of :func:`bench.e2e_bench.tree` has two leaves; round ``i``'s leaves follow them, one per replay
and one for held (:func:`leaf_index`)."""


def shapes(split: bool = False) -> tuple[str, ...]:
    """The shapes of every round: :data:`SHAPES`, and :data:`SPLIT_SHAPES` with ``split``."""
    return SHAPES + SPLIT_SHAPES if split else SHAPES


def namespaces(index: int) -> tuple[str, str, str]:
    """``(held, replay, raw)`` namespaces of round ``index``."""
    return f"bench-round-{index}", f"bench-replay-{index}", f"bench-round-raw-{index}"


def namespace(shape: str, index: int) -> str:
    """The namespace of ``shape`` in round ``index``."""
    held, replay, raw = namespaces(index)
    split = {name: f"bench-{name.replace('_', '-')}-{index}" for name in SPLIT_SHAPES}
    return {"held": held, "replay": replay, "raw": raw, **split}[shape]


def leaf_index(index: int, split: bool = False) -> int:
    """Where round ``index``'s held leaf is among the root's children (its replays' leaves follow it)."""
    return FIRST_ROUND_CHILD + (1 + (len(REPLAYS) if split else 1)) * (index - 1)


def order(index: int, split: bool = False) -> tuple[str, ...]:
    """The shapes of round ``index`` (from 1) in the order they run: :func:`shapes` rotated by ``index - 1``."""
    every = shapes(split)
    shift = (index - 1) % len(every)
    return every[shift:] + every[:shift]


async def skip_webhooks(client: KubeClient) -> None:
    """Make each webhook of :data:`SKIPPED` skip the namespaces with its label (on the bench's own cluster)."""
    for resource, hook, label in SKIPPED.values():
        ref = ResourceRef("admissionregistration.k8s.io", "v1", resource)
        for item in mappings((await client.request("GET", ref.path(None))).get("items")):
            for position, webhook in enumerate(mappings(item.get("webhooks"))):
                if webhook.get("name") != hook:
                    continue
                expressions = [*mappings(mapping(webhook.get("namespaceSelector")).get("matchExpressions")),
                               {"key": label, "operator": "DoesNotExist"}]
                await client.json_patch(ref, name_of(item), [
                    {"op": "add", "path": f"/webhooks/{position}/namespaceSelector/matchExpressions",
                     "value": expressions}])


def leaf(name: str, namespace: str, total: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "min": dict.fromkeys(total, "0"), "max": {**total, "kube-queue/max-jobs": 0},
            "namespaces": [namespace]}


async def run_round(client: KubeClient, controller: KubeClient, index: int, *, trees: ResourceRef, tree_name: str,
                    count: int, in_flight: int, total: dict[str, str],
                    cpu: Callable[[], Mapping[str, float]], split: bool = False,
                    memory: Callable[[], Mapping[str, float]] | None = None) -> dict[str, Any]:
    """Round ``index``: prepare the shapes, then run them in this round's order; each shape's figures.
    ``controller`` is a client under the controller's identity (for the replays); ``cpu`` gives the CPU seconds
    of the cluster's processes so far (:func:`bench.e2e_metrics.cpu_seconds`), ``memory`` their resident MiB
    (:func:`bench.e2e_metrics.resident_mib`, read when each shape's pods run); ``split`` adds
    :data:`SPLIT_SHAPES` (after :func:`skip_webhooks`)."""
    every = shapes(split)
    replays = [shape for shape in REPLAYS if shape in every]
    held, raw = namespace("held", index), namespace("raw", index)
    await client.json_patch(trees, tree_name, [
        {"op": "add", "path": "/spec/root/children/-", "value": leaf(f"round-{index}", held, total)},
        *({"op": "add", "path": "/spec/root/children/-",
           "value": leaf(f"{shape.replace('_', '-')}-{index}", namespace(shape, index), total)} for shape in replays)])
    for shape in every:
        labels = {SKIPPED[shape][2]: "true"} if shape in SKIPPED else {}
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": namespace(shape, index), "labels": labels}})
    managed = [namespace(shape, index) for shape in every if shape != "raw"]
    await e2e_shapes.namespaces_ready(client, managed, (raw,))
    for name in managed:
        await e2e_shapes.create_all(client, [e2e_shapes.job(number, name) for number in range(count)], name)
        await e2e_shapes.all_suspended(client, name, count)
    await e2e_shapes.raw_prepare(client, raw, count)
    child = leaf_index(index, split)

    async def lift() -> None:
        patch = [{"op": "replace", "path": f"/spec/root/children/{child}/max/kube-queue~1max-jobs", "value": count * 2}]
        await client.json_patch(trees, tree_name, patch)

    out: dict[str, Any] = {"order": order(index, split)}
    for shape in out["order"]:
        quiet = await e2e_shapes.settled()
        print(f"e2e bench: round {index}, {TITLES[shape]} (machine quiet after {quiet:.1f} s) ...", file=sys.stderr)
        before = cpu()
        name = namespace(shape, index)
        if shape == "held":
            out[shape] = await e2e_shapes.held_release(client, name, count, lift)
        elif shape == "raw":
            out[shape] = await e2e_shapes.raw_release(client, name, count, in_flight)
        else:
            tree_spec = dict(spec_of(await client.request("GET", trees.path(tree_name))))
            out[shape] = await e2e_shapes.replay_release(client, controller, tree_spec, name, count=count,
                                                         in_flight=in_flight)
        await e2e_shapes.pods_running(client, name, count)
        after = cpu()
        spent = {process: (after[process] - before.get(process, 0.0)) * 1000 / count for process in after}
        out[shape]["cpu_ms"] = {**{process: spent[process] for process in CPU_SHOWN if process in spent},
                                "all": sum(spent.values())}
        if memory is not None:
            out[shape]["rss_mib"] = {process: mib for process, mib in memory().items() if process in CPU_SHOWN}
    return out


def rate(one: dict[str, Any], shape: str) -> float:
    return float(one[shape]["sustained_per_second"])


def ratio(one: dict[str, Any], top: str, bottom: str) -> float:
    below = rate(one, bottom)
    return rate(one, top) / below if below > 0 else float("nan")


RATIOS = (("held", "raw"), ("replay", "raw"), ("held", "replay"))
CPU_SHOWN = ("kq-serve", "kube-apiserver")
"""The processes whose CPU per release the rounds report (from each shape's start to its pods running), beside
``all`` (every process of the dev cluster)."""


CPU_COLUMNS = (*CPU_SHOWN, "all")


def _present(rounds: list[dict[str, Any]]) -> tuple[str, ...]:
    """The shapes every round ran, in :func:`shapes` order."""
    return tuple(shape for shape in shapes(split=True) if all(shape in one for one in rounds))


def _cpu_lines(rounds: list[dict[str, Any]]) -> list[str]:
    present = _present(rounds)
    if not all("cpu_ms" in one[shape] for one in rounds for shape in present):
        return []
    lines = [f"CPU ms per release, from the start of each shape to its pods running (`all`: every process of the "
             f"dev cluster; the rounds add {len(present)} namespaces of jobs each, so later rounds run beside more "
             "jobs), and `kq serve`'s resident memory then:", "",
             f"| round | shape | {' | '.join(CPU_COLUMNS)} | kq-serve resident MiB, pods running |",
             "|---:|---|" + "---:|" * (len(CPU_COLUMNS) + 1)]
    for number, one in enumerate(rounds, start=1):
        for shape in present:
            cells = " | ".join(f"{one[shape]['cpu_ms'].get(name, float('nan')):.1f}" for name in CPU_COLUMNS)
            resident = one[shape].get("rss_mib", {}).get("kq-serve")
            lines.append(f"| {number} | {TITLES[shape]} | {cells} | {'-' if resident is None else f'{resident:.0f}'} |")
    return [*lines, ""]


def _cpu_median(rounds: list[dict[str, Any]], shape: str) -> float:
    return statistics.median(float(one[shape].get("cpu_ms", {}).get("all", float("nan"))) for one in rounds)


def _split_lines(rounds: list[dict[str, Any]]) -> list[str]:
    """What each webhook of the admission path costs: its replay beside the full one (nothing without
    ``--split``)."""
    present = _present(rounds)
    if not all(shape in present for shape in SPLIT_SHAPES):
        return []
    lines = [
        "What each guarantee of the admission path costs (`--split`): the same replay in a namespace "
        "`jobs.validate` skips (no update check: its condition is not evaluated on the release) and in one "
        "`pods.mutate` skips (no pod webhook: no marker, so no extender call either), beside the full replay "
        "of the same round.",
        "",
        "| round | replay | no update check | no pod webhook | raw release | no update check / replay "
        "| no pod webhook / replay |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for number, one in enumerate(rounds, start=1):
        cells = [f"{rate(one, shape):.1f} /s" for shape in ("replay", *SPLIT_SHAPES, "raw")]
        shares = [f"{100 * ratio(one, shape, 'replay'):.0f} %" for shape in SPLIT_SHAPES]
        lines.append(f"| {number} | {' | '.join(cells)} | {' | '.join(shares)} |")
    medians = [f"{100 * statistics.median(ratio(one, shape, 'replay') for one in rounds):.0f} %"
               for shape in SPLIT_SHAPES]
    lines += [f"| **median** | | | | | {medians[0]} | {medians[1]} |", ""]
    if all("cpu_ms" in one[shape] for one in rounds for shape in present):
        cpu = {shape: _cpu_median(rounds, shape) for shape in ("replay", *SPLIT_SHAPES, "raw")}
        lines += [
            f"Median CPU per release, every process: replay {cpu['replay']:.1f} ms, no update check "
            f"{cpu['no_check']:.1f} ms, no pod webhook {cpu['no_pod_hook']:.1f} ms, raw release {cpu['raw']:.1f} ms.",
            "",
        ]
    return lines


def report_lines(rounds: list[dict[str, Any]]) -> list[str]:
    """The rounds' table and their medians (nothing without rounds)."""
    if not rounds:
        return []
    lines = [
        f"Repeated rounds (`--rounds {len(rounds)}`), after the five shapes, each on namespaces of its own, the "
        "three shapes in rotating order: sustained releases of held (the controller), replay (the controller's "
        "patches sent by the bench: the admission path without the controller) and raw release, and their "
        "ratios in the same round" + (" (with `--split`, the two replays below ran in the same rotation)."
                                      if all(shape in _present(rounds) for shape in SPLIT_SHAPES) else "."),
        "",
        "| round | order | held | replay | raw release | held / raw | replay / raw | held / replay |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for number, one in enumerate(rounds, start=1):
        cells = [f"{rate(one, shape):.1f} /s" for shape in SHAPES]
        shares = [f"{100 * ratio(one, top, bottom):.0f} %" for top, bottom in RATIOS]
        shown = ", ".join(TITLES[shape] for shape in one["order"])
        lines.append(f"| {number} | {shown} | {' | '.join(cells)} | {' | '.join(shares)} |")
    medians = [f"{100 * statistics.median(ratio(one, top, bottom) for one in rounds):.0f} %" for top, bottom in RATIOS]
    lines += [
        f"| **median** | | | | | **{medians[0]}** | {medians[1]} | {medians[2]} |",
        "",
        f"Median of held / raw: **{medians[0]}** (goal of issue 23: at least 90 %); of it, the admission path "
        f"keeps {medians[1]} (replay / raw) and the controller {medians[2]} (held / replay).",
        "",
        *_split_lines(rounds),
        *_cpu_lines(rounds),
    ]
    return lines

"""``kq simulate``: replay a scenario on a virtual clock with the live controller's decision code.

    kq simulate examples/scenarios/seed-1-round.yaml
    kq simulate examples/scenarios/seed-3-reclaim.yaml --timeline
    kq simulate examples/scenarios/peer-shape.yaml -o json > run.json

The simulator (:mod:`webhook.sim`) is a shell of its own and may not import the controller, so the CLI wires
them together here: :class:`ControllerPath` hands the simulator the controller's own pure decision function
(:func:`webhook.controller.decide.decide`) and its job view (:func:`webhook.controller.model.track`). The
benchmarks and tests use the same wiring, so every simulated decision is the controller's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from webhook.controller.decide import decide
from webhook.controller.model import TrackedJob, track
from webhook.controller.settings import parse_rate
from webhook.core.quota import QuotaNode, QuotaTree
from webhook.core.workload import Workload
from webhook.sim.engine import DecisionPath, ReclaimStep, SimJob, SimResult, Verdict, simulate
from webhook.sim.report import to_json, to_text
from webhook.sim.scenario import Scenario, ScenarioError, load_scenario, parse_duration
from webhook.workloads.base import Adapter


class ControllerPath:
    """The controller's decision code, shaped for the simulator (:class:`webhook.sim.engine.DecisionPath`)."""

    def __init__(self, reclaim_tries_per_quota: int = 16) -> None:
        self.reclaim_tries_per_quota = reclaim_tries_per_quota

    def workload(
        self, adapter: Adapter, obj: Mapping[str, Any], leaf: QuotaNode, priority_classes: Mapping[str, int]
    ) -> Workload:
        return track(adapter, obj, leaf, priority_classes).workload

    @staticmethod
    def _tracked(job: SimJob) -> TrackedJob:
        handle = job.handle
        if isinstance(handle, TrackedJob) and handle.workload is job.workload:
            return handle
        # An admitted job carries its admission record in the cluster; the record only matters to the
        # controller for jobs held again while still carrying one (never the case here).
        tracked = TrackedJob(adapter=job.adapter, obj=job.obj, workload=job.workload, leaf=job.leaf, record=None)
        job.handle = tracked
        return tracked

    def decide(
        self,
        tree: QuotaTree,
        jobs: Sequence[SimJob],
        queues: Mapping[str, Mapping[str, Any]],
        *,
        oversell_rate: Fraction,
        strict_priority: bool,
    ) -> Verdict:
        decisions = decide(
            tree,
            [self._tracked(job) for job in jobs],
            queues,
            oversell_rate=oversell_rate,
            strict_priority=strict_priority,
            reclaim_tries_per_quota=self.reclaim_tries_per_quota,
        )
        return Verdict(
            admissions=tuple(job.workload.key for job in decisions.admissions),
            reclaims=tuple(
                ReclaimStep(
                    preemptor=plan.preemptor.workload.key,
                    victims=tuple(victim.workload.key for victim in plan.victims),
                    reason=plan.reason,
                )
                for plan in decisions.reclaims
            ),
            late_admissions=tuple(job.workload.key for job in decisions.late_admissions),
            positions=decisions.positions,
            reasons=decisions.reasons,
            policies=decisions.policies,
            checks=decisions.checks,
        )


def controller_path() -> DecisionPath:
    """The live controller's decision path (what every simulation should use)."""
    return ControllerPath()


def run_scenario(scenario: Scenario, *, record_timeline: bool = True) -> SimResult:
    """Simulate ``scenario`` with the controller's decision code."""
    return simulate(scenario, controller_path(), record_timeline=record_timeline)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay a scenario (quota tree, nodes, timed job submissions) on a virtual clock",
        description=(
            "Replay SCENARIO (a YAML file: an ElasticQuotaTree, optional PriorityClasses, a Scenario document with "
            "settings and nodes, and job manifests with submit and run times) through the live controller's "
            "decision code on a virtual clock, and report per quota: admissions, waits (p50/p95/max), use of "
            "min and max, borrowing and evictions. See webhook/sim/README.md for the format."
        ),
        epilog=(
            "examples:\n"
            "  kq simulate examples/scenarios/seed-1-round.yaml\n"
            "  kq simulate examples/scenarios/seed-3-reclaim.yaml --timeline\n"
            "  kq simulate examples/scenarios/peer-shape.yaml -o json\n"
            "  kq simulate my.yaml --oversellrate 1 --strict-priority --until 10m"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenario", metavar="SCENARIO", help="the scenario YAML file")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="report format")
    parser.add_argument("--timeline", action="store_true",
                        help="also print every decision: time, job, quota, decision, reason")
    parser.add_argument("--oversellrate", type=parse_rate, metavar="RATE",
                        help="override the scenario's oversell rate (1 = strictly by quota)")
    parser.add_argument("--strict-priority", action=argparse.BooleanOptionalAction, default=None,
                        help="override the scenario's StrictPriority (every queue Block)")
    parser.add_argument("--until", metavar="DURATION", help="stop the virtual clock at DURATION (e.g. 10m)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(args.scenario)
        until = None if args.until is None else parse_duration(args.until, "--until")
    except ScenarioError as error:
        print(f"kq simulate: {error}", file=sys.stderr)
        return 2
    scenario = scenario.with_settings(
        oversell_rate=args.oversellrate, strict_priority=args.strict_priority, until=until
    )
    result = run_scenario(scenario, record_timeline=True)
    if args.output == "json":
        sys.stdout.write(to_json(result, timeline=args.timeline))
    else:
        sys.stdout.write(to_text(result, timeline=args.timeline))
    return 0


__all__ = ["ControllerPath", "controller_path", "register", "run", "run_scenario"]

"""``kq simulate``: replay a scenario on a virtual clock with the live controller's decision code.

    kq simulate examples/scenarios/seed-1-round.yaml
    kq simulate examples/scenarios/seed-3-reclaim.yaml --timeline
    kq simulate examples/scenarios/peer-shape.yaml -o json > run.json

The simulator (:mod:`webhook.sim`) runs the core's decision pass (:func:`webhook.core.decide.decide`), the very
function the live controller runs on every change (:class:`webhook.sim.engine.CorePath`); the benchmarks and
tests use the same path, so every simulated decision is the controller's.
"""

from __future__ import annotations

import argparse
import sys

from webhook.cli.args import Subparsers
from webhook.controller.settings import rate_flag
from webhook.readmodel.commandline import command_parser
from webhook.sim.engine import CorePath, SimResult, simulate
from webhook.sim.model import Scenario, ScenarioError, parse_duration
from webhook.sim.report import to_json, to_text
from webhook.sim.scenario import load_scenario


def controller_path() -> CorePath:
    """The live controller's decision path (what every simulation should use): the core's pass."""
    return CorePath()


def run_scenario(scenario: Scenario, *, record_timeline: bool = True) -> SimResult:
    """Simulate ``scenario`` with the controller's decision code."""
    return simulate(scenario, controller_path(), record_timeline=record_timeline)


def register(subparsers: Subparsers) -> None:
    parser = command_parser(
        subparsers,
        "simulate",
        "Replay SCENARIO (a YAML file: an ElasticQuotaTree, optional PriorityClasses, a Scenario document with "
        "settings and nodes, and job manifests with submit and run times) through the live controller's "
        "decision code on a virtual clock, and report per quota: admissions, waits (p50/p95/max), use of "
        "min and max, borrowing and evictions. See webhook/sim/README.md for the format.",
        [
            "kq simulate examples/scenarios/seed-1-round.yaml",
            "kq simulate examples/scenarios/seed-3-reclaim.yaml --timeline",
            "kq simulate examples/scenarios/peer-shape.yaml -o json",
            "kq simulate my.yaml --oversellrate 1 --strict-priority --until 10m",
            "kq simulate examples/scenarios/fair-sharing.yaml --fair-sharing off",
        ],
        wrap=False,
    )
    parser.add_argument("scenario", metavar="SCENARIO", help="the scenario YAML file")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="report format")
    parser.add_argument("--timeline", action="store_true",
                        help="also print every decision: time, job, quota, decision, reason")
    parser.add_argument("--oversellrate", type=rate_flag, metavar="RATE",
                        help="override the scenario's oversell rate (1 = strictly by quota)")
    parser.add_argument("--strict-priority", action=argparse.BooleanOptionalAction, default=None,
                        help="override the scenario's StrictPriority (every queue Block)")
    parser.add_argument("--until", metavar="DURATION", help="stop the virtual clock at DURATION (e.g. 10m)")
    parser.add_argument("--fair-sharing", choices=("on", "off"),
                        help="share the spare by weight at every parent quota (on), or nowhere (off); "
                             "docs/fair-sharing.md")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(args.scenario)
        until = None if args.until is None else parse_duration(args.until, "--until")
    except ScenarioError as error:
        print(f"kq simulate: {error}", file=sys.stderr)
        return 2
    scenario = scenario.with_settings(
        oversell_rate=args.oversellrate, strict_priority=args.strict_priority, until=until,
        fair_sharing=None if args.fair_sharing is None else args.fair_sharing == "on",
    )
    result = run_scenario(scenario, record_timeline=True)
    if args.output == "json":
        sys.stdout.write(to_json(result, timeline=args.timeline))
    else:
        sys.stdout.write(to_text(result, timeline=args.timeline))
    return 0


__all__ = ["controller_path", "register", "run", "run_scenario"]

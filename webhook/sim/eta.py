"""Start estimates in the simulator: its state as the estimator's input, the run-time history of the jobs it saw
finish, and every job's first start (docs/eta.md; ``bench/eta_bench.py`` measures the estimate's accuracy with
it).

:class:`EtaSimulator` is a :class:`~webhook.sim.engine.Simulator` that also keeps, as the controller does, the
run times of the jobs it finished (:class:`~webhook.core.runtimes.RuntimeHistory`, by namespace, kind and name
stem) and calls an observer after each decision time, which may ask :func:`replay_input` what the estimator
would be given at that moment.
"""

from __future__ import annotations

from collections.abc import Callable

from webhook.core.decide import leaf_policies
from webhook.core.decisions import PlainJob
from webhook.core.eta_replay import ReplayInput
from webhook.core.runtimes import Runtime, RuntimeHistory
from webhook.core.workload import WorkloadKey
from webhook.sim.engine import CorePath, Simulator, State
from webhook.sim.model import MICROS, Scenario
from webhook.workloads.runtime import job_runtime, stem_of

__all__ = ["EtaSimulator", "replay_input"]


class EtaSimulator(Simulator):
    """A simulator that records first starts and the run-time history, and calls ``observe(simulator, at)``
    (``at`` in microseconds) after the decisions of each event time."""

    def __init__(
        self,
        scenario: Scenario,
        path: CorePath | None = None,
        *,
        observe: Callable[[EtaSimulator, int], None] | None = None,
    ) -> None:
        super().__init__(scenario, path, record_timeline=False)
        self.observe = observe
        self.history = RuntimeHistory()
        self.first_start: dict[int, int] = {}
        """Job index -> when its pods first ran (microseconds)."""

    def _finish(self, index: int, generation: int, at: int) -> bool:
        done = super()._finish(index, generation, at)
        job = self.jobs[index]
        if done and job is not None and job.started is not None:
            key = (job.key.namespace, job.key.kind, stem_of(job.obj))
            self.history.add(key, (at - job.started) / MICROS, at / MICROS)
        return done

    def _start_pending(self, at: int) -> None:
        waiting = list(self.pending.values())
        super()._start_pending(at)
        for job in waiting:
            if job.state is State.RUNNING and job.index not in self.first_start:
                self.first_start[job.index] = at

    def _settle(self, at: int) -> None:
        super()._settle(at)
        if self.observe is not None:
            self.observe(self, at)


def replay_input(simulator: EtaSimulator, at: int, runtimes: dict[int, Runtime] | None = None) -> ReplayInput:
    """What the estimator is given at ``at``: every unfinished job as the controller would hold it, the run time
    of each (its declaration, else the history so far, else unknown; ``runtimes`` by job index overrides), when
    the running ones started, and the scenario's settings."""
    scenario = simulator.scenario
    tree = scenario.tree
    jobs = []
    known: dict[WorkloadKey, Runtime] = {}
    since: dict[WorkloadKey, float] = {}
    for job in simulator.active.values():
        jobs.append(PlainJob(job.workload))
        if runtimes is not None and job.index in runtimes:
            known[job.key] = runtimes[job.index]
        else:
            known[job.key] = job_runtime(job.obj, job.key.kind, simulator.history, job.leaf.namespaces, job.adapter)
        if job.state is State.RUNNING and job.started is not None:
            since[job.key] = job.started / MICROS
    return ReplayInput(
        tree=tree,
        jobs=jobs,
        policies=leaf_policies(tree, scenario.queues, scenario.strict_priority),
        rate=scenario.oversell_rate,
        now=at / MICROS,
        runtimes=known,
        running_since=since,
    )

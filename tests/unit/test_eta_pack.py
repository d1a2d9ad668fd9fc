"""A start estimate the controller keeps packed (webhook/core/eta_pack.py) reads back as ``kq why`` would say the
estimate itself (docs/queueing.md, "Why a job waits, from the controller"): the same sentences and the same
``-o json`` fields, in a tenth of the memory."""

from __future__ import annotations

import sys

import pytest

from bench.eta_bench import cost_snapshot
from webhook.core.eta import Estimate, Why, estimate
from webhook.core.eta_pack import pack_estimate, unpack_estimate
from webhook.core.eta_replay import Basis
from webhook.core.handoff import Handoff
from webhook.core.runtimes import Runtime, Source
from webhook.core.workload import WorkloadKey
from webhook.readmodel.eta import EtaFields, eta_fields, eta_lines, replay_report

NOW = 1_780_000_000.0
TURN = Handoff(1.5, 0.75)
HISTORY = Runtime(300.0, 420.0, Source.NAMESPACE, samples=(250.0, 300.0, 310.0, 420.0))
CASES = {
    "history": Estimate(NOW + 600, NOW + 900, NOW + 900, NOW + 1320, HISTORY, Basis(12, 2, 10, 0, 40, 1.3)),
    "declared": Estimate(NOW + 60, NOW + 60, NOW + 90, NOW + 90, Runtime(30.0, 30.0, Source.DECLARED),
                         Basis(1, 1, 0, 0, 0, 1.0)),
    "deadline": Estimate(NOW + 5, NOW + 50, None, None, Runtime(None, 3600.0, Source.DEADLINE, deadline=3600.0),
                         Basis(3, 0, 0, 3, 0, 1.0)),
    "unknown jobs ahead": Estimate(None, NOW + 7200, None, None,
                                   Runtime(None, None, Source.UNKNOWN, problem="expected-runtime 'soon' is no time"),
                                   Basis(), Why.UNKNOWN_RUNTIMES,
                                   (WorkloadKey("Job", "user-a", "long"), WorkloadKey("PyTorchJob", "user-b", "x.y"))),
    "never fits": Estimate(None, None, None, None, Runtime(None, None, Source.UNKNOWN), Basis(), Why.NEVER_FITS),
}


def _said(found: Estimate, samples: int | None) -> tuple[list[str], EtaFields]:
    report = replay_report(found, TURN, samples)
    return eta_lines(report, NOW), eta_fields(report)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_packed_estimate_says_what_the_estimate_says(case: str) -> None:
    found = CASES[case]
    unpacked, samples = unpack_estimate(pack_estimate(found))
    assert _said(unpacked, samples) == _said(found, None)
    assert unpacked.unknown_jobs == found.unknown_jobs and unpacked.why is found.why


def test_the_replays_estimates_read_back_the_same_and_stay_small() -> None:
    given, _ = cost_snapshot(300)
    found = estimate(given)
    assert len(found.by_key) >= 300
    sizes = []
    for original in found.by_key.values():
        blob = pack_estimate(original)
        sizes.append(sys.getsizeof(blob))
        unpacked, samples = unpack_estimate(blob)
        assert _said(unpacked, samples) == _said(original, None)
    assert max(sizes) < 160, max(sizes)  # an estimate object with its run time and basis: some 750 bytes

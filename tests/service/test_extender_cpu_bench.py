"""``bench/extender_cpu.py`` measures what it says: filter requests the bench's policy governs (its first unit
chosen, the window cut), and watch events that bind the pods in the extender's state."""

from __future__ import annotations

import logging

import orjson
import pytest

from bench import extender_cpu


def test_each_filter_request_is_a_governed_decision_on_the_first_unit(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="webhook.extender"):
        requests_s, events_s = extender_cpu.passes(12, 2)
    assert len(requests_s) == len(events_s) == 2 and min(requests_s) > 0 and min(events_s) > 0
    decisions = [record.getMessage() for record in caplog.records if "verb=filter" in record.getMessage()]
    assert len(decisions) == 24
    for line in decisions:
        assert "policy=bench/bench" in line and 'unit="unit 1 (ecs)"' in line, line
        assert "nodes=500 passing=230" in line and "sampled_from=500" in line and "assumed=true" in line, line


def test_the_watch_events_bind_the_pod_in_the_state() -> None:
    state = extender_cpu.build_state()
    cache = extender_cpu.pod_cache(state)
    apply = extender_cpu.applier(cache)
    bound = extender_cpu.api_pod("p-1", "node-00007", "Pending")
    running = extender_cpu.api_pod("p-1", "node-00007", "Running")
    running["metadata"]["uid"] = bound["metadata"]["uid"]
    apply(orjson.dumps({"type": "ADDED", "object": bound}))
    apply(orjson.dumps({"type": "MODIFIED", "object": running}))
    view = state.pod(bound["metadata"]["uid"])
    assert view is not None and view.node_name == "node-00007" and view.namespace == extender_cpu.NAMESPACE
    assert len(cache) == 1

"""A controller replica run by the harness (tests/e2e/harness.py) starts, takes the Lease and releases it on
a clean stop."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import LoopThread, Replica, loop_thread, replica_settings, service_without_controller

pytestmark = pytest.mark.e2e
__all__ = ["loop_thread", "service_without_controller"]  # fixtures used by this module


def test_a_replica_starts_leads_and_stops_cleanly(
    service_without_controller: DevCluster, loop_thread: LoopThread
) -> None:
    dev = service_without_controller
    settings = replica_settings()
    replica = Replica(loop_thread, dev.config.state_dir / "controller.kubeconfig", settings).start()
    try:
        dev.wait_until(replica.is_leader, 30, "the replica to take the Lease")
        lease = dev.get_json("lease", settings.lease_name, "-n", settings.lease_namespace)
        assert lease["spec"]["holderIdentity"] == settings.identity
    finally:
        replica.stop()
    lease = dev.get_json("lease", settings.lease_name, "-n", settings.lease_namespace)
    assert not lease["spec"].get("holderIdentity"), "a clean stop releases the Lease"

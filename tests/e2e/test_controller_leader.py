"""Two controller replicas elect one leader with a coordination.k8s.io Lease: exactly one admits; when it
dies (killed, the Lease left to expire) the other takes over and admits."""

from __future__ import annotations

import functools

import pytest

from tests.builders import job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import (
    LoopThread,
    Replica,
    create_namespaces,
    installed_tree,
    loop_thread,
    replica_settings,
    service_without_controller,
    unique,
    wait_managed,
)

pytestmark = pytest.mark.e2e
__all__ = ["loop_thread", "service_without_controller"]  # fixtures used here


_held_job = functools.partial(job_manifest, pods=None, cpu=1, suspend=True, container="work", grace_seconds=None)
"""A held one-pod Job of 1 CPU."""


def _admitted(dev: DevCluster, namespace: str, name: str) -> bool:
    job = dev.get_json("job", name, "-n", namespace)
    return job["spec"].get("suspend") is False


def test_exactly_one_replica_admits_and_the_other_takes_over_when_it_dies(
    service_without_controller: DevCluster, loop_thread: LoopThread
) -> None:
    dev = service_without_controller
    leaf = unique("leader")
    namespace = f"{leaf}-ns"
    spec = {
        "root": {
            "name": "root",
            "min": {"cpu": 8},
            "max": {"cpu": 8},
            "children": [{"name": leaf, "max": {"cpu": 8}, "namespaces": [namespace]}],
        }
    }
    kubeconfig = dev.config.state_dir / "controller.kubeconfig"
    lease = unique("kq-leader-test")
    one = replica_settings(lease_name=lease, identity=f"{leaf}-one")
    two = replica_settings(lease_name=lease, identity=f"{leaf}-two")
    create_namespaces(dev, namespace)
    replicas = [Replica(loop_thread, kubeconfig, one).start(), Replica(loop_thread, kubeconfig, two).start()]
    try:
        with installed_tree(dev, spec):
            dev.wait_until(lambda: any(r.is_leader() for r in replicas), 30, "a leader")
            leader, follower = replicas if replicas[0].is_leader() else replicas[::-1]
            assert not follower.is_leader()
            holder = dev.get_json("lease", lease, "-n", "kube-queue")["spec"]["holderIdentity"]
            assert holder == leader.settings.identity
            wait_managed(dev, namespace)
            for index in range(3):
                dev.apply(_held_job(f"before-{index}", namespace=namespace))
            dev.wait_until(
                lambda: all(_admitted(dev, namespace, f"before-{i}") for i in range(3)), 60, "3 jobs admitted"
            )
            assert leader.admitted() == 3
            assert follower.admitted() == 0, "the follower keeps its caches warm but admits nothing"

            leader.kill()
            dev.wait_until(follower.is_leader, 60, "the follower to take the Lease over")
            holder = dev.get_json("lease", lease, "-n", "kube-queue")["spec"]["holderIdentity"]
            assert holder == follower.settings.identity
            dev.apply(_held_job("after", namespace=namespace))
            dev.wait_until(lambda: _admitted(dev, namespace, "after"), 60, "the new leader to admit")
            assert follower.admitted() == 1
            assert leader.admitted() == 3
    finally:
        for replica in replicas:
            if replica.running:
                replica.stop()
        dev.kubectl("delete", "namespace", namespace, "--wait=false")

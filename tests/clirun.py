"""Running ``kq`` in-process against the fake API (``tests/fakeapi.py``) over the seed's cluster, and the golden
files its output is compared with (a support module, not a test module).

The cluster is the seed's: Department-a (user-a, user-b) and Department-b (user-c), the controller running
with oversell rate 1. ``KQ_UPDATE_GOLDEN=1`` rewrites the golden files (then read the diff).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests import fakeapi
from tests.builders import cluster_pod
from tests.fakeapi import FakeApi, batch_job, event, priority_class, queue
from tests.kubefake import stamp
from webhook.cli.main import build_parser
from webhook.core.ledger import build_ledger
from webhook.core.tree_status import status_tree
from webhook.readmodel.context import Ctx
from webhook.readmodel.fetch import load_snapshot
from webhook.readmodel.kubeapi import ApiError
from webhook.readmodel.submit import JobOptions, build_job
from webhook.readmodel.view import job_views

GOLDEN = Path(__file__).parent / "unit" / "golden"
SEED = Path(__file__).resolve().parents[1] / "examples" / "seed"
T0 = 1_780_000_000.0
NOW = T0 + 1000
CONTROLLER_SAID_PI2 = (
    "Queued at position 2 in quota root/Department-a (queue kube-queue/root-department-a-user-a, policy Round): "
    "quota root/Department-a: cpu request 60 + used 60 > limit 100 (max 100 × oversell 1); quota root: cpu "
    "request 60 + used 74 > limit 100 (max 100 × oversell 1)"
)


def seed_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((SEED / "01-elasticquotatree.yaml").read_text())["spec"]
    return spec


def kubeflow_job(name: str, namespace: str, workers: int, created: float, admitted_at: float | None) -> dict[str, Any]:
    obj = build_job(JobOptions(kind="pytorchjob", namespace=namespace, name=name, cpu="2", memory="4Gi", gpus=1,
                               workers=workers, command=("python", "train.py")))
    metadata, spec = obj["metadata"], obj["spec"]
    assert isinstance(metadata, dict) and isinstance(spec, dict)
    metadata.update(
        creationTimestamp=stamp(created),
        uid=f"uid-{namespace}-{name}",
        labels={fakeapi.QUOTA_LABEL: "Department-b"},
        annotations={fakeapi.QUOTA_FULLNAME: "root/Department-b"},
    )
    spec["runPolicy"]["suspend"] = admitted_at is None
    if admitted_at is not None:
        metadata["annotations"][fakeapi.ADMISSION] = json.dumps(
            {"quota": "root/Department-b", "request": {"cpu": str(2 * workers)}, "admittedAt": stamp(admitted_at)}
        )
    return obj


def _role(role: str, index: int) -> dict[str, str]:
    return {"training.kubeflow.org/replica-type": role, "training.kubeflow.org/replica-index": str(index)}


def seed_objects(with_status: bool = True) -> list[dict[str, Any]]:
    """The fake cluster: see the module notes."""
    a, b = "Department-a", "Department-b"
    pi1 = batch_job("pi1", "user-a", workers=6, cpu="10", memory="10Gi", created=T0 + 100, leaf=a,
                    admitted_at=T0 + 101)
    pi2 = batch_job("pi2", "user-a", workers=6, cpu="10", memory="10Gi", created=T0 + 110, leaf=a, suspended=True)
    big = batch_job("big", "user-b", workers=4, cpu="10", memory="10Gi", created=T0 + 105, leaf=a, suspended=True)
    done = batch_job("done", "user-a", workers=2, created=T0 + 10, leaf=a,
                     conditions=[{"type": "Complete", "status": "True", "lastTransitionTime": stamp(T0 + 80)}],
                     succeeded=2)
    broke = batch_job("broke", "user-a", created=T0 + 20, leaf=a, conditions=[
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit", "lastTransitionTime": stamp(T0 + 90)}])
    pend = batch_job("pend", "user-c", workers=2, cpu="5", memory="5Gi", created=T0 + 300, leaf=b,
                     admitted_at=T0 + 301, priority_class="priority-2")
    mnist = kubeflow_job("mnist", "user-c", 2, T0 + 400, T0 + 402)
    loose = batch_job("loose", "default", created=T0 + 500, suspended=True)
    pods = [
        cluster_pod(f"pi1-{i}", namespace="user-a", owner=pi1, node_name=f"ecs-{i % 4}", created=stamp(T0 + 102))
        for i in range(6)
    ]
    pods += [
        cluster_pod("pend-0", namespace="user-c", owner=pend, created=stamp(T0 + 302)),
        cluster_pod("pend-1", namespace="user-c", owner=pend, phase="Pending", created=stamp(T0 + 302), unschedulable=(
            "0/5 nodes are available: 1 node(s) had untolerated taint(s), 4 pod-level quota (bound and placed "
            "pods): quota root/Department-b: cpu request 5 + used 100 > max 100.")),
        cluster_pod("mnist-worker-0", namespace="user-c", owner=mnist, created=stamp(T0 + 403),
                    labels=_role("worker", 0)),
        cluster_pod("mnist-master-0", namespace="user-c", owner=mnist, created=stamp(T0 + 403),
                    labels=_role("master", 0)),
        cluster_pod("loose-x", namespace="default", phase="Succeeded", created=stamp(T0 + 1)),
    ]
    objects: list[dict[str, Any]] = [pi1, pi2, big, done, broke, pend, mnist, loose, *pods]
    objects += [
        queue("root-department-a-user-a", "root/Department-a", [
            {"name": "pi2", "namespace": "user-a", "priority": 0, "position": 2}], created=T0, rate="1"),
        queue("root-department-a-user-b", "root/Department-a", [
            {"name": "big", "namespace": "user-b", "priority": 0, "position": 1}], created=T0, rate="1"),
        queue("root-department-b-user-c", "root/Department-b", [], created=T0, rate="1"),
        priority_class("priority-2", 2),
        fakeapi.node("ecs-0"),
        event(pi1, "Admitted", "Admitted by quota root/Department-a (request cpu=60, memory=60Gi, oversell rate 1)",
              T0 + 101),
        event(pi2, "Queued", CONTROLLER_SAID_PI2, T0 + 410),
        event(pi2, "Suspended", "Job suspended", T0 + 110, component="job-controller"),
    ]
    tree_obj = fakeapi.tree(seed_spec(), created=T0)
    if with_status:
        # The status the controller would write: the core's ledger over the jobs' admission records.
        full = load_snapshot(FakeApi([tree_obj, *objects], now=NOW, served={"kubeflow.org": ["v1"]}), None, now=NOW)
        assert full.tree is not None
        workloads = [view.workload for view in job_views(full) if view.workload is not None]
        tree_obj["status"] = status_tree(full.tree, build_ledger(full.tree, workloads))
    return [tree_obj, *objects]


def seed_api(**kwargs: Any) -> FakeApi:
    logs: dict[tuple[str, str], list[str] | ApiError] = {
        ("user-c", "mnist-master-0"): ["epoch 1 loss 0.9", "epoch 2 loss 0.5"],
        ("user-c", "mnist-worker-0"): ["worker ready", "epoch 1 done"],
        ("user-a", "pi1-0"): ApiError(
            500, "Internal Server Error",
            'Get "https://:10250/containerLogs/user-a/pi1-0/main": dial tcp :10250: connect: connection refused'),
    }
    with_status = kwargs.pop("with_status", True)
    return FakeApi(seed_objects(with_status), namespace="user-a", now=NOW, served={"kubeflow.org": ["v1"]},
                   logs=logs, **kwargs)


@dataclass
class Result:
    code: int
    out: str
    err: str


def run(
    argv: Sequence[str],
    api: FakeApi,
    width: int = 80,
    sleep: Callable[[float], None] = lambda _: None,
    now: Callable[[], float] = lambda: NOW,
) -> Result:
    """Run ``kq ARGV`` in this process against ``api`` with a fixed clock; its exit code and output."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    out, err = io.StringIO(), io.StringIO()
    args.ctx = Ctx(api_factory=lambda: api, now=now, sleep=sleep, out=out, err=err, width=width)
    handler = args.handler
    code = handler(args)
    return Result(code, out.getvalue(), err.getvalue())


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("KQ_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with KQ_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"output differs from {path} (KQ_UPDATE_GOLDEN=1 rewrites it)"


def fits(text: str, width: int = 80) -> None:
    long = [line for line in text.splitlines() if len(line) > width]
    assert long == [], f"lines over {width} columns: {long}"

"""Golden-output tests of the developer commands over a fake API (``tests/fakeapi.py``).

The cluster is the seed's: Department-a (user-a, user-b) and Department-b (user-c), the controller running
with oversell rate 1. Every command's output is compared with ``tests/unit/golden/<name>.txt``; run with
``KQ_UPDATE_GOLDEN=1`` to rewrite the files after an intended change (then read the diff).
"""

from __future__ import annotations

import argparse
import io
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import fakeapi
from tests.fakeapi import FakeApi, batch_job, event, pod, priority_class, queue, stamp
from webhook.cli.common import Ctx
from webhook.cli.fetch import load_snapshot
from webhook.cli.kubeapi import ApiError
from webhook.cli.main import build_parser, main
from webhook.cli.submit import JobOptions, build_job
from webhook.cli.view import job_views
from webhook.core.ledger import build_ledger, status_tree

GOLDEN = Path(__file__).parent / "golden"
SEED = Path(__file__).resolve().parents[2] / "examples" / "seed"
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
    obj["metadata"].update(
        creationTimestamp=stamp(created),
        uid=f"uid-{namespace}-{name}",
        labels={fakeapi.QUOTA_LABEL: "Department-b"},
        annotations={fakeapi.QUOTA_FULLNAME: "root/Department-b"},
    )
    obj["spec"]["runPolicy"]["suspend"] = admitted_at is None
    if admitted_at is not None:
        obj["metadata"]["annotations"][fakeapi.ADMISSION] = json.dumps(
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
    pods = [pod(f"pi1-{i}", "user-a", pi1, node=f"ecs-{i % 4}", created=T0 + 102) for i in range(6)]
    pods += [
        pod("pend-0", "user-c", pend, created=T0 + 302),
        pod("pend-1", "user-c", pend, phase="Pending", created=T0 + 302, unschedulable=(
            "0/5 nodes are available: 1 node(s) had untolerated taint(s), 4 pod-level quota (bound and placed "
            "pods): quota root/Department-b: cpu request 5 + used 100 > max 100.")),
        pod("mnist-worker-0", "user-c", mnist, created=T0 + 403, labels=_role("worker", 0)),
        pod("mnist-master-0", "user-c", mnist, created=T0 + 403, labels=_role("master", 0)),
        pod("loose-x", "default", None, phase="Succeeded", created=T0 + 1),
    ]
    objects: list[dict[str, Any]] = [pi1, pi2, big, done, broke, pend, mnist, loose, *pods]
    objects += [
        queue("root-department-a-user-a", "root/Department-a", [
            {"name": "pi2", "namespace": "user-a", "priority": 0, "position": 2}], created=T0),
        queue("root-department-a-user-b", "root/Department-a", [
            {"name": "big", "namespace": "user-b", "priority": 0, "position": 1}], created=T0),
        queue("root-department-b-user-c", "root/Department-b", [], created=T0),
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


GOLDEN_COMMANDS = {
    "list": ["list"],
    "list_all_namespaces": ["list", "-A"],
    "list_wide": ["list", "-A", "-o", "wide"],
    "list_json": ["list", "-n", "user-c", "-o", "json"],
    "list_queuing": ["list", "-A", "--status", "QUEUING"],
    "get_queuing": ["get", "pi2"],
    "get_running_kubeflow": ["get", "mnist", "-n", "user-c"],
    "why_queuing": ["why", "pi2"],
    "why_queuing_first": ["why", "big", "-n", "user-b", "--oversellrate", "1"],
    "why_running": ["why", "pi1"],
    "why_pending": ["why", "pend", "-n", "user-c"],
    "why_succeeded": ["why", "done"],
    "why_failed": ["why", "broke"],
    "why_unmanaged": ["why", "loose", "-n", "default"],
    "top_quota": ["top", "quota"],
    "top_quota_wide": ["top", "quota", "-o", "wide"],
    "top_quota_json": ["top", "quota", "-o", "json"],
    "queue_list": ["queue", "list"],
    "queue_get_mine": ["queue", "get"],
    "queue_get_by_leaf": ["queue", "get", "Department-a", "-n", "user-b"],
    "logs_chief": ["logs", "mnist", "-n", "user-c"],
    "logs_all": ["logs", "mnist", "-n", "user-c", "--all", "--tail", "1"],
}


@pytest.mark.parametrize("name", sorted(GOLDEN_COMMANDS))
def test_command_output_matches_its_golden_file(name: str) -> None:
    result = run(GOLDEN_COMMANDS[name], seed_api())
    assert result.code == 0, result.err
    check_golden(name, result.out)
    if not name.endswith("json"):
        fits(result.out, 120 if name.endswith("wide") else 80)


def test_the_quota_tree_without_status_is_computed_from_the_jobs_and_matches_the_status() -> None:
    computed = run(["top", "quota"], seed_api(with_status=False))
    from_status = run(["top", "quota"], seed_api())
    assert computed.out == from_status.out
    assert "the jobs (the tree has no status yet)" in computed.err
    assert "the ElasticQuotaTree's status" in from_status.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["why", "pi3"], "error: job 'pi3' not found in namespace user-a; did you mean pi2 or pi1? (kq list"),
        (["why", "mnist"], "error: job 'mnist' not found in namespace user-a; it is in namespace user-c: add -n"),
        (["get", "nothing", "-n", "empty"], "error: job 'nothing' not found in namespace empty, which has no jobs"),
        (["logs", "pi2"], "error: pi2 has no pods yet: it is QUEUING at position 2; see `kq why pi2`"),
        (["logs", "pi1"], "error: cannot read the logs of pod pi1-0: it runs on node ecs-0, a kwok fake node"),
        (["logs", "mnist", "-n", "user-c", "-i", "nope"], "error: -i 'nope' names none of the job's pods"),
        (["queue", "get", "nope"], "error: Queue 'nope' not found in kube-queue (kq queue list)"),
        (["delete", "ghost"], "error: job 'ghost' not found in namespace user-a"),
        (["why", "rayjob/x"], "error: job 'x' not found in namespace user-a"),
        (["why", "widget/x"], "error: unknown kind 'widget'"),
    ],
)
def test_errors_are_one_line_on_stderr_with_a_non_zero_exit(argv: list[str], message: str) -> None:
    result = run(argv, seed_api())
    assert result.code == 1
    assert result.out == ""
    assert result.err.startswith(message), result.err
    assert result.err.count("\n") == 1


def test_a_job_in_another_namespace_is_pointed_at() -> None:
    result = run(["why", "big"], seed_api())
    assert result.err == "error: job 'big' not found in namespace user-a; it is in namespace user-b: add -n user-b\n"


def test_the_kwok_log_error_names_the_node_and_the_reason_on_one_line() -> None:
    """A kwok cluster whose nodes do not point at a kwok log server (the dev cluster's do)."""
    result = run(["logs", "pi1"], seed_api())
    assert result.err == (
        "error: cannot read the logs of pod pi1-0: it runs on node ecs-0, a kwok fake node with no kubelet and no "
        "kwok log server configured for it (kwok ClusterLogs; `kq dev up` sets it up), so there are no logs to read "
        '(the API server said: Get "https://:10250/containerLogs/user-a/pi1-0/main": dial tcp :10250: connect: '
        "connection refused (500 Internal Server Error))\n"
    )


def test_delete_deletes_the_job_and_says_so() -> None:
    api = seed_api()
    result = run(["delete", "pi2", "done"], api)
    assert result.code == 0, result.err
    assert result.out == "job.batch/pi2 deleted from namespace user-a\njob.batch/done deleted from namespace user-a\n"
    assert ("batch", "jobs", "user-a", "pi2") not in api.objects
    assert ("DELETE", "/apis/batch/v1/namespaces/user-a/jobs/pi2", ()) in api.requests


def test_the_namespace_defaults_to_the_kubeconfig_context() -> None:
    api = seed_api()
    api.namespace = "user-c"
    result = run(["list"], api)
    assert [line.split()[0] for line in result.out.splitlines()[1:]] == ["mnist", "pend"]


def test_positions_are_computed_when_the_queue_status_is_stale() -> None:
    objects = seed_objects()
    for obj in objects:
        if obj.get("kind") == "Queue":
            obj["status"] = {"queueItemDetails": {"active": [], "backoff": []}}  # written before the jobs came
    api = FakeApi(objects, namespace="user-a", now=NOW, served={"kubeflow.org": ["v1"]})
    rows = {line.split()[1]: line.split() for line in run(["list", "-A"], api).out.splitlines()[1:]}
    assert rows["big"][5] == "1" and rows["pi2"][5] == "2"


def test_a_user_who_cannot_read_other_namespaces_still_gets_positions_from_the_queue_status() -> None:
    api = seed_api(forbidden=[("jobs", None), ("jobs", "user-b"), ("pods", None)])
    result = run(["list"], api)
    assert result.code == 0, result.err
    pi2 = next(line for line in result.out.splitlines() if line.startswith("pi2"))
    assert pi2.split()[4] == "2"
    why = run(["why", "pi2"], api)
    assert why.code == 0, why.err
    assert "usage from the ElasticQuotaTree's status" in " ".join(why.out.split())


def test_why_without_read_access_to_the_tree_falls_back_to_the_controllers_word() -> None:
    api = seed_api(forbidden=[("elasticquotatrees", "kube-system")])
    result = run(["why", "pi2"], api)
    assert result.code == 0, result.err
    check_golden("why_queuing_tree_forbidden", result.out)


def test_list_watch_prints_the_table_then_the_rows_that_change() -> None:
    api = seed_api()
    rounds = iter(range(3))

    def tick(_: float) -> None:
        step = next(rounds)
        if step == 0:  # pi2 is admitted
            job = api.objects[("batch", "jobs", "user-a", "pi2")]
            job["spec"]["suspend"] = False
        elif step == 1:
            del api.objects[("batch", "jobs", "user-a", "done")]

    result = run(["list", "--watch", "--watch-rounds", "3"], api, sleep=tick)
    assert result.code == 0, result.err
    check_golden("list_watch", result.out)


def test_every_command_has_help_with_examples_in_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    commands = actions[0].choices
    for name in ("submit", "list", "get", "delete", "why", "logs", "top", "queue"):
        assert name in commands, name
        text = commands[name].format_help()
        assert "examples:\n  kq " in text, name
        fits(text)
    nested = {"submit": ("job", "pytorchjob", "tfjob", "mpijob"), "top": ("quota",), "queue": ("list", "get")}
    for name, subs in nested.items():
        sub_action = next(a for a in commands[name]._actions if isinstance(a, argparse._SubParsersAction))
        for sub in subs:
            text = sub_action.choices[sub].format_help()
            assert "examples:\n  kq " in text, (name, sub)
            fits(text)


def test_a_missing_kubeconfig_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["list", "--kubeconfig", str(tmp_path / "nope")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"error: kubeconfig {tmp_path / 'nope'} does not exist\n"


def test_an_unreachable_cluster_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(json.dumps({
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "team"}}],
        "current-context": "c",
    }))
    assert main(["list", "--kubeconfig", str(config)]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("error: cannot list jobs in namespace team: cannot reach the API server "
                                   "http://127.0.0.1:9: ")
    assert captured.err.count("\n") == 1


def test_logs_follow_waits_for_a_queued_job_to_start() -> None:
    api = seed_api()
    api.logs[("user-a", "pi2-0")] = ["started", "working"]

    def admit(_: float) -> None:
        job = api.objects[("batch", "jobs", "user-a", "pi2")]
        job["spec"]["suspend"] = False
        api.add(pod("pi2-0", "user-a", job))

    result = run(["logs", "pi2", "-f"], api, sleep=admit)
    assert result.code == 0, result.err
    assert result.err == "waiting for pi2 to start: it is QUEUING at position 2 (kq why pi2)\n"
    assert result.out == "started\nworking\n"
    assert ("GET", "/api/v1/namespaces/user-a/pods/pi2-0/log", (("follow", "true"),)) in api.requests


def test_why_lists_at_most_the_nearest_jobs_ahead_and_counts_the_rest() -> None:
    objects = [obj for obj in seed_objects() if obj.get("kind") != "Queue"]
    objects += [batch_job(f"deep-{index:03d}", "user-a", workers=6, cpu="10", created=T0 + 10 + index,
                          leaf="Department-a", suspended=True) for index in range(30)]
    objects.append(batch_job("last", "user-a", workers=6, cpu="10", created=T0 + 100, leaf="Department-a",
                             suspended=True))
    api = FakeApi(objects, namespace="user-a", now=NOW, served={"kubeflow.org": ["v1"]})
    capped = run(["why", "last", "--oversellrate", "1"], api, width=200)
    assert capped.code == 0, capped.err
    rows = [line for line in capped.out.splitlines() if line.split() and line.split()[0].isdigit()]
    assert len(rows) == 20
    assert "... and 10 more ahead of it (kq why last -n user-a --ahead 0 lists them all" in capped.out
    everything = run(["why", "last", "--oversellrate", "1", "--ahead", "0"], api, width=200)
    assert len([line for line in everything.out.splitlines() if line.split() and line.split()[0].isdigit()]) == 30
    assert "more ahead of it" not in everything.out

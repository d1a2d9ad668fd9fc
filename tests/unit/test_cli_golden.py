"""Golden-output tests of the developer commands over a fake API (``tests/fakeapi.py``).

The cluster is the seed's: Department-a (user-a, user-b) and Department-b (user-c), the controller running
with oversell rate 1. Every command's output is compared with ``tests/unit/golden/<name>.txt``; run with
``KQ_UPDATE_GOLDEN=1`` to rewrite the files after an intended change (then read the diff).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tests.builders import cluster_pod
from tests.clirun import NOW, T0, check_golden, fits, run, seed_api, seed_objects
from tests.fakeapi import FakeApi, batch_job
from webhook.api.names import POD_OVERHEAD_ANNOTATION
from webhook.cli.main import build_parser, main

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
    "why_pending_json": ["why", "pend", "-n", "user-c", "-o", "json"],
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
        api.add(cluster_pod("pi2-0", namespace="user-a", owner=job))

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


def test_a_kind_the_user_may_not_list_in_their_namespace_is_left_out() -> None:
    # An operator's kind (its CRD installed) that the developer's `edit` role does not grant: the Jobs they may
    # read are still listed, and the other kinds' absence is no error.
    api = seed_api(forbidden=[("pytorchjobs", None), ("pytorchjobs", "user-a"), ("tfjobs", None),
                              ("tfjobs", "user-a")])
    result = run(["list"], api)
    assert result.code == 0, result.err
    assert any(line.startswith("pi1") for line in result.out.splitlines())


def test_why_says_the_request_holds_its_runtime_class_overhead() -> None:
    objects = seed_objects()
    pi2 = next(obj for obj in objects if obj["kind"] == "Job" and obj["metadata"]["name"] == "pi2")
    pi2["spec"]["template"]["spec"]["runtimeClassName"] = "kata"
    pi2["metadata"].setdefault("annotations", {})[POD_OVERHEAD_ANNOTATION] = json.dumps(
        {"kata": {"cpu": "1", "memory": "64Mi"}})
    out = run(["why", "pi2"], FakeApi(objects, namespace="user-a", now=NOW)).out
    assert "Request: cpu=66, memory=60.4Gi, with each pod's RuntimeClass overhead (kata: cpu 1, memory 64Mi)." in (
        " ".join(out.split()))  # six pods of 10 CPU, and 1 each for the class

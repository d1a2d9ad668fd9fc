"""``kq submit``: the objects it builds (golden YAML), what it prints, its errors, ``-f`` and ``--wait``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import cluster_pod
from tests.clirun import NOW, check_golden, fits, run, seed_api
from tests.fakeapi import FakeApi
from webhook.workloads.registry import adapter_for

DRY_RUNS = {
    "submit_job": ["submit", "job", "--name", "pi1", "--cpu", "10", "--memory", "10Gi", "--workers", "6",
                   "-n", "user-a", "--dry-run", "--", "sleep", "60"],
    "submit_pytorchjob": ["submit", "pytorchjob", "--name", "mnist", "--gpus", "1", "--cpu", "4", "--workers", "3",
                          "--image", "pytorch/pytorch", "--priority", "priority-2", "-e", "EPOCHS=3",
                          "--dry-run", "--", "python train.py --epochs $EPOCHS"],
    "submit_tfjob": ["submit", "tfjob", "--name", "tf", "--cpu", "2", "--memory", "4Gi", "--workers", "2",
                     "--annotation", "dev.kube-queue.x-k8s.io/succeed-after=60s", "--label", "team=ml", "--dry-run"],
    "submit_mpijob": ["submit", "mpijob", "--name", "hvd", "--cpu", "8", "--workers", "2", "--dry-run", "--",
                      "mpirun", "-np", "2", "python", "hvd.py"],
    "submit_jobset": ["submit", "jobset", "--name", "train", "--cpu", "2", "--memory", "4Gi", "--workers", "3",
                      "--priority", "priority-2", "--dry-run", "--", "python", "train.py"],
}


@pytest.mark.parametrize("name", sorted(DRY_RUNS))
def test_dry_run_prints_the_object_as_yaml(name: str) -> None:
    api = seed_api()
    result = run(DRY_RUNS[name], api)
    assert result.code == 0, result.err
    check_golden(name, result.out)
    assert api.created == []
    obj = yaml.safe_load(result.out)
    group, _, _ = obj["apiVersion"].rpartition("/")
    adapter = adapter_for(group, obj["kind"])
    assert adapter is not None
    workers = int(DRY_RUNS[name][DRY_RUNS[name].index("--workers") + 1])
    counts = {t.name: t.count for t in adapter.pod_templates(obj)}
    expected_pods = workers + (1 if obj["kind"] == "MPIJob" else 0)
    assert sum(counts.values()) == expected_pods, counts


def test_submit_creates_the_job_and_says_what_to_run_next() -> None:
    api = seed_api()
    result = run(["submit", "job", "--name", "pi3", "--cpu", "10", "--memory", "10Gi", "--workers", "6", "--",
                  "sleep", "60"], api)
    assert result.code == 0, result.err
    check_golden("submit_created", result.out)
    fits(result.out)
    (created,) = api.created
    assert created["metadata"]["namespace"] == "user-a"
    assert created["spec"]["parallelism"] == created["spec"]["completions"] == 6
    sent = next(body for method, path, body in api.bodies if method == "POST")
    assert "suspend" not in sent["spec"], "the queue's webhook holds the job, not kq"


def test_submit_in_an_unmanaged_namespace_says_the_job_is_not_queued() -> None:
    result = run(["submit", "job", "--name", "free", "-n", "default", "--", "true"], seed_api())
    assert result.code == 0, result.err
    assert "namespace default is not managed by kube-queue: the job is not queued and starts now" in result.out
    assert "kq why free -n default" in result.out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--name", "Pi_1"], "error: --name 'Pi_1' is not a valid job name"),
        (["--cpu", "ten"], "error: --cpu 'ten' is not a quantity"),
        (["--memory", "0"], "error: --memory must be more than 0"),
        (["--workers", "0"], "error: --workers must be at least 1"),
        (["-e", "NOVALUE"], "error: -e/--env takes KEY=VALUE, got 'NOVALUE'"),
        (["--name", "pi1"], "error: Job pi1 already exists in namespace user-a: pick another --name or "
                            "`kq delete pi1 -n user-a`"),
    ],
)
def test_bad_submissions_are_one_line_errors(argv: list[str], message: str) -> None:
    result = run(["submit", "job", *argv, "--", "true"], seed_api())
    assert result.code == 1
    assert result.err.startswith(message), result.err
    assert result.err.count("\n") == 1


def test_a_kubeflow_kind_the_cluster_does_not_serve_is_named() -> None:
    api = FakeApi([], namespace="team", now=NOW)
    result = run(["submit", "pytorchjob", "--name", "mnist", "--", "python", "train.py"], api)
    assert result.code == 1
    assert result.err == (
        "error: the cluster does not serve PyTorchJob (kubeflow.org/v1): install its operator (docs/job-kinds.md) "
        "or submit a `kq submit job`\n"
    )


def test_submit_from_a_file_applies_the_overrides(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "x-"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}},
    }))
    api = seed_api()
    result = run(["submit", "job", "-f", str(spec), "--name", "fromfile", "-e", "A=1",
                  "--annotation", "dev.kube-queue.x-k8s.io/succeed-after=5s"], api)
    assert result.code == 0, result.err
    (created,) = api.created
    assert created["metadata"]["name"] == "fromfile" and "generateName" not in created["metadata"]
    template = created["spec"]["template"]
    assert template["metadata"]["annotations"]["dev.kube-queue.x-k8s.io/succeed-after"] == "5s"
    assert template["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]


@pytest.mark.parametrize(
    ("body", "extra", "message"),
    [
        ({"kind": "TFJob", "apiVersion": "kubeflow.org/v1", "metadata": {"name": "t"}}, [],
         "holds a 'TFJob', not a Job; use `kq submit tfjob -f"),
        ({"kind": "Job", "metadata": {"name": "t", "namespace": "other"}}, ["-n", "user-a"],
         "is for namespace 'other' but -n says 'user-a'"),
        ({"kind": "Job", "metadata": {"name": "t"}}, ["--cpu", "2"], "--cpu cannot be combined with -f"),
    ],
)
def test_bad_files_are_refused(tmp_path: Path, body: dict[str, Any], extra: list[str], message: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(body))
    result = run(["submit", "job", "-f", str(spec), *extra], seed_api())
    assert result.code == 1
    assert message in result.err
    assert result.err.count("\n") == 1


def test_wait_prints_each_status_change_until_the_job_runs() -> None:
    api = seed_api()
    steps = iter(range(10))

    def advance(_: float) -> None:
        job = api.objects[("batch", "jobs", "user-a", "w")]
        step = next(steps)
        if step == 1:
            job["spec"]["suspend"] = False  # admitted: its pods are being created
        elif step == 2:
            api.add(cluster_pod("w-0", namespace="user-a", owner=job))

    result = run(["submit", "job", "--name", "w", "--wait", "--", "true"], api, sleep=advance)
    assert result.code == 0, result.err
    assert result.out.splitlines()[-3:] == [
        "w: QUEUING (position 3 in quota root/Department-a)",
        "w: PENDING (0/1 pods running)",
        "w: RUNNING (1/1 pods running)",
    ]


def test_wait_gives_up_after_the_timeout() -> None:
    clock = iter(float(NOW + step) for step in range(100))
    argv = ["submit", "job", "--name", "w", "--cpu", "100", "--wait", "--timeout", "10", "--", "true"]
    result = run(argv, seed_api(), now=lambda: next(clock))
    assert result.code == 1
    assert result.err.startswith("error: w is still QUEUING after 10s; see why: kq why w -n user-a")


def test_an_unreachable_cluster_is_not_called_a_refusal() -> None:
    from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415

    class Down(FakeApi):
        def create(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            raise ApiError(0, "ConnectionError", "cannot connect to https://127.0.0.1:16401: connection refused")

    result = run(["submit", "job", "--name", "pi", "--", "sleep", "1"], Down([], namespace="team", now=NOW))
    assert result.code == 1
    assert result.err == (
        "error: cannot reach the cluster to create Job pi: cannot connect to https://127.0.0.1:16401: connection "
        "refused; nothing was created\n"
    )

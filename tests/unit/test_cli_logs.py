"""``kq logs`` streaming logic with a stub API: prefixes, several pods followed at once, one line per failure."""

from __future__ import annotations

import argparse
import functools
import threading
from collections.abc import Iterator, Mapping, Sequence

import pytest

from tests import builders
from tests.fakeapi import FakeApi
from webhook.cli.logs import parse_duration, stream_pods
from webhook.readmodel.kubeapi import ApiError
from webhook.readmodel.logs import choose_pods, log_query

_pod = functools.partial(builders.pod, cpu=None, namespace=None, node_name="n1", labels={})


def _replica(role: str | None = None, index: int | None = None) -> dict[str, str]:
    """The labels of a Kubeflow replica of type ``role`` and of an indexed Job's pod ``index``."""
    labels = {}
    if role:
        labels["training.kubeflow.org/replica-type"] = role
    if index is not None:
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
    return labels


class GatedApi(FakeApi):
    """The CLI's fake API server serving ``lines`` as the logs of pods in ``ns``; pod ``b``'s second line comes
    only once ``gate`` is set, so that the test can interleave two followed streams."""

    def __init__(self, lines: Mapping[str, Sequence[str] | ApiError], gate: threading.Event | None = None) -> None:
        super().__init__(logs={("ns", pod): found for pod, found in lines.items()})
        self.gate = gate

    def stream_lines(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Iterator[str]:
        for number, line in enumerate(super().stream_lines(path, query)):
            if self.gate is not None and "/pods/b/" in path and number == 1:
                self.gate.wait(10)  # b's second line comes only after a has printed everything
            yield line


def test_one_pod_prints_plain_lines() -> None:
    api = GatedApi({"a": ["one", "two"]})
    out: list[str] = []
    assert stream_pods(api, "ns", [_pod("a")], [("follow", "true")], write=out.append, fail=out.append,
                       prefix=False) == 0
    assert out == ["one", "two"]
    assert api.requests == [("GET", "/api/v1/namespaces/ns/pods/a/log", (("follow", "true"),))]


def test_several_followed_pods_interleave_with_prefixes_and_keep_each_pods_order() -> None:
    gate = threading.Event()
    api = GatedApi({"a": ["a1", "a2", "a3"], "b": ["b1", "b2"]}, gate)
    out: list[str] = []

    def write(line: str) -> None:
        out.append(line)
        if line == "[a] a3":
            gate.set()

    failures = stream_pods(api, "ns", [_pod("a"), _pod("b")], [], write=write, fail=out.append, prefix=True)
    assert failures == 0
    assert sorted(out) == ["[a] a1", "[a] a2", "[a] a3", "[b] b1", "[b] b2"]
    assert [line for line in out if line.startswith("[a]")] == ["[a] a1", "[a] a2", "[a] a3"]
    assert out.index("[b] b2") > out.index("[a] a3"), "b's stream waited while a's went on"


def test_a_failing_pod_is_one_line_and_the_others_still_stream() -> None:
    refused = ApiError(500, "Internal Server Error", 'Get "https://:10250/containerLogs/ns/b/main": dial tcp :10250')
    api = GatedApi({"a": ["a1"], "b": refused})
    out: list[str] = []
    problems: list[str] = []
    failures = stream_pods(api, "ns", [_pod("a"), _pod("b", node_name="ecs-9")], [], write=out.append,
                           fail=problems.append, prefix=True)
    assert failures == 1
    assert out == ["[a] a1"]
    assert problems == [
        "cannot read the logs of pod b: the API server could not reach the kubelet of node ecs-9: "
        'Get "https://:10250/containerLogs/ns/b/main": dial tcp :10250 (500 Internal Server Error)'
    ]


def test_the_chief_comes_first_then_the_indexes() -> None:
    pods = [_pod("w1", labels=_replica("worker", 1)), _pod("w0", labels=_replica("worker", 0)),
            _pod("m", labels=_replica("master")), _pod("z")]
    assert [p["metadata"]["name"] for p in choose_pods(pods, None, True)] == ["m", "w0", "w1", "z"]
    assert [p["metadata"]["name"] for p in choose_pods(pods, None, False)] == ["m"]
    indexed = [_pod("job-b", labels=_replica(index=1)), _pod("job-a", labels=_replica(index=0))]
    assert [p["metadata"]["name"] for p in choose_pods(indexed, None, False)] == ["job-a"]


def test_a_jobsets_leader_comes_first() -> None:
    pods = [_pod(name, labels={"jobset.sigs.k8s.io/replicatedjob-name": job})
            for name, job in (("train-a-workers-0-0", "workers"), ("train-z-leader-0-0", "leader"))]
    assert [p["metadata"]["name"] for p in choose_pods(pods, None, False)] == ["train-z-leader-0-0"]


def test_an_mpi_operator_launcher_comes_first() -> None:
    """The MPI Operator v2 labels its pods ``training.kubeflow.org/job-role`` (the launcher, a Job's pod, has no
    replica type): its launcher, named after its Job, sorts after its workers by name."""
    role = "training.kubeflow.org/job-role"
    pods = [_pod("hvd-worker-0", labels={role: "worker", "training.kubeflow.org/replica-index": "0"}),
            _pod("hvd-launcher-x7k2q", labels={role: "launcher"})]
    assert [p["metadata"]["name"] for p in choose_pods(pods, None, False)] == ["hvd-launcher-x7k2q"]


def test_a_pod_is_chosen_by_name_or_unique_ending() -> None:
    pods = [_pod("mnist-worker-0"), _pod("mnist-worker-1"), _pod("mnist-master-0")]
    assert choose_pods(pods, "mnist-worker-1", False)[0]["metadata"]["name"] == "mnist-worker-1"
    assert choose_pods(pods, "worker-1", False)[0]["metadata"]["name"] == "mnist-worker-1"
    with pytest.raises(ValueError, match="names none of the job's pods"):
        choose_pods(pods, "worker", False)


def test_the_query_carries_follow_tail_since_and_container() -> None:
    assert log_query("main", True, 20, 600, False) == [
        ("container", "main"), ("follow", "true"), ("tailLines", "20"), ("sinceSeconds", "600"),
    ]
    assert log_query(None, False, None, None) == []


@pytest.mark.parametrize(("text", "seconds"), [("30", 30), ("30s", 30), ("5m", 300), ("1h30m", 5400), ("2h", 7200)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m", "-1s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)

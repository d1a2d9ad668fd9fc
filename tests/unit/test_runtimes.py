"""How long a job runs (docs/eta.md): ``webhook/core/runtimes.py`` and ``webhook/workloads/runtime.py``."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.api.names import EXPECTED_RUNTIME_ANNOTATION
from webhook.core.runtimes import (
    MAX_SAMPLES,
    OVERDUE_SHARE,
    DeclaredRuntimeError,
    Runtime,
    RuntimeHistory,
    Source,
    history_items,
    name_stem,
    parse_runtime,
    restore_items,
    running_since,
    runtime_for,
)
from webhook.workloads.registry import adapter_for
from webhook.workloads.runtime import active_deadline, declared_runtime, finished_at, job_runtime, stem_of, succeeded


@pytest.mark.parametrize(("name", "generate", "stem"), [
    ("train-7", None, "train"),
    ("train-00012", None, "train"),
    ("train-x7k2p", "train-", "train"),
    ("resnet50-run3", None, "resnet50-run"),
    ("eval", None, "eval"),
    ("12345", None, "12345"),
    ("my_job.2", None, "my_job"),
])
def test_the_name_stem_is_the_generate_name_or_the_name_without_its_counter(
    name: str, generate: str | None, stem: str
) -> None:
    assert name_stem(name, generate) == stem


@pytest.mark.parametrize(("text", "seconds"), [("45m", 2700), ("1h30m", 5400), ("2d", 172800), ("90", 90),
                                               ("1.5h", 5400), (" 10s ", 10)])
def test_a_declared_run_time_reads_like_a_scenario_duration(text: str, seconds: float) -> None:
    assert parse_runtime(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-5m", "0", "", "5 minutes"])
def test_a_declared_run_time_that_cannot_be_used_is_refused_with_what_to_write(text: str) -> None:
    with pytest.raises(DeclaredRuntimeError, match=r"45m|more than zero"):
        parse_runtime(text)


def test_the_history_keeps_the_newest_samples_and_drops_the_least_recently_finished_group() -> None:
    history = RuntimeHistory(max_groups=2)
    for index in range(MAX_SAMPLES + 5):
        history.add(("ns", "Job", "train"), float(index), 1000.0 + index)
    assert history.groups[("ns", "Job", "train")] == [float(index) for index in range(5, MAX_SAMPLES + 5)]
    history.add(("ns", "Job", "eval"), 10.0, 2000.0)
    history.add(("ns", "Job", "sweep"), 10.0, 3000.0)
    assert set(history.groups) == {("ns", "Job", "eval"), ("ns", "Job", "sweep")}


def test_a_namespace_with_many_stems_forgets_its_own_groups_not_another_namespaces() -> None:
    history = RuntimeHistory(max_groups=5, max_namespace_groups=3)
    history.add(("victim", "Job", "train"), 60.0, 1.0)
    for index in range(50):
        history.add(("noisy", "Job", f"stem{index}"), 1.0, 10.0 + index)
    assert ("victim", "Job", "train") in history.groups
    assert sorted(key[2] for key in history.groups if key[0] == "noisy") == ["stem47", "stem48", "stem49"]


def test_history_is_read_in_the_namespace_first_then_in_the_queue() -> None:
    history = RuntimeHistory()
    for seconds in (100.0, 200.0, 300.0):
        history.add(("a", "Job", "train"), seconds, 1.0)
    history.add(("b", "Job", "train"), 1000.0, 1.0)
    own = history.runtime("a", "Job", "train", ["a", "b"])
    assert own is not None and own.source is Source.NAMESPACE and own.p50 == 200 and own.p90 == 300
    pooled = history.runtime("c", "Job", "train", ["a", "b", "c"])
    assert pooled is not None and pooled.source is Source.QUEUE and len(pooled.samples) == 4
    assert pooled.groups == ((("a", "Job", "train"), 3), (("b", "Job", "train"), 1))
    assert history.runtime("c", "Job", "train", ["c"]) is None
    assert history.runtime("a", "PyTorchJob", "train", ["a"]) is None  # another kind is another job


def test_a_running_job_has_left_the_run_time_of_the_samples_longer_than_it_has_run() -> None:
    runtime = Runtime(300.0, 500.0, Source.NAMESPACE, (100.0, 300.0, 400.0, 500.0))
    assert runtime.remaining(0.0, 0.5) == 300
    assert runtime.remaining(350.0, 0.5) == 50  # of 400 and 500, the median is 400
    assert runtime.remaining(600.0, 0.5) == OVERDUE_SHARE * 300  # past every sample: late, not endless
    capped = Runtime(300.0, 500.0, Source.NAMESPACE, (100.0, 300.0, 400.0, 500.0), deadline=380.0)
    assert capped.remaining(350.0, 0.9) == 30  # stopped at its deadline


def test_declared_wins_then_history_then_the_deadline_caps_every_figure() -> None:
    history = Runtime(600.0, 900.0, Source.QUEUE, (600.0, 900.0))
    assert runtime_for(120.0, None, history).source is Source.DECLARED
    capped = runtime_for(None, 700.0, history)
    assert (capped.p50, capped.p90, capped.source) == (600.0, 700.0, Source.QUEUE)
    alone = runtime_for(None, 700.0, None)
    assert (alone.p50, alone.p90, alone.source) == (None, 700.0, Source.DEADLINE)
    assert runtime_for(None, None, None).source is Source.UNKNOWN


def test_the_history_goes_to_a_queue_status_and_back() -> None:
    history = RuntimeHistory()
    history.add(("ns", "Job", "train"), 61.4, 1_780_000_000.0)
    history.add(("ns", "Job", "train"), 90.0, 1_780_000_100.0)
    history.add(("other", "Job", "eval"), 5.0, 1_780_000_000.0)
    items = history_items(history, "ns")
    assert items == [{"kind": "Job", "stem": "train", "seconds": [61, 90], "lastFinished": "2026-05-28T20:28:20Z"}]
    restored = RuntimeHistory()
    junk = [{"kind": 3}, "junk", {"kind": "Job", "stem": "x", "seconds": []}]
    assert restore_items(restored, "ns", [*items, *junk]) == 1
    assert restored.groups == {("ns", "Job", "train"): [61.0, 90.0]}
    assert restored.last[("ns", "Job", "train")] == 1_780_000_100.0
    assert restore_items(RuntimeHistory(), "ns", "not a list") == 0


def job(annotations: dict[str, Any] | None = None, spec: dict[str, Any] | None = None,
        status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "train-3", "namespace": "ns", "annotations": annotations or {}, **meta},
            "spec": spec or {}, "status": status or {}}


def test_a_job_object_says_its_declared_run_time_or_why_it_cannot_be_used() -> None:
    assert declared_runtime(job({EXPECTED_RUNTIME_ANNOTATION: "30m"})) == (1800.0, "")
    seconds, problem = declared_runtime(job({EXPECTED_RUNTIME_ANNOTATION: "a while"}))
    assert seconds is None and EXPECTED_RUNTIME_ANNOTATION in problem and "45m" in problem
    assert declared_runtime(job()) == (None, "")


def test_a_declared_run_time_on_the_pod_template_counts_as_kq_submit_puts_it_there() -> None:
    adapter = adapter_for("batch", "Job")
    obj = job(spec={"template": {"metadata": {"annotations": {EXPECTED_RUNTIME_ANNOTATION: "2m"}}, "spec": {}}})
    assert declared_runtime(obj, adapter) == (120.0, "")
    assert declared_runtime(obj) == (None, "")  # without the adapter only the job's own is read


def test_a_job_object_says_its_deadline_where_its_kind_puts_it() -> None:
    assert active_deadline(job(spec={"activeDeadlineSeconds": 600})) == 600
    assert active_deadline(job(spec={"runPolicy": {"activeDeadlineSeconds": 60}})) == 60
    assert active_deadline(job(spec={"activeDeadlineSeconds": "x"})) is None
    assert active_deadline(job()) is None


def test_a_job_object_says_when_it_finished_and_whether_it_succeeded() -> None:
    done = job(status={"completionTime": "2026-05-28T20:28:20Z",
                       "conditions": [{"type": "Complete", "status": "True"}]})
    assert finished_at(done) == 1_780_000_100.0 and succeeded(done)
    failed = job(status={"conditions": [{"type": "Failed", "status": "True",
                                         "lastTransitionTime": "2026-05-28T20:28:20Z"}]})
    assert finished_at(failed) == 1_780_000_100.0 and not succeeded(failed)
    ray = job(status={"jobStatus": "SUCCEEDED", "endTime": "2026-05-28T20:28:20Z"})
    assert succeeded(ray) and finished_at(ray) == 1_780_000_100.0
    assert finished_at(job()) is None and not succeeded(job())


def test_a_job_runtime_combines_its_declaration_history_and_deadline() -> None:
    history = RuntimeHistory()
    history.add(("ns", "Job", "train"), 300.0, 1.0)
    assert stem_of(job(generateName="train-")) == "train"
    from_history = job_runtime(job(spec={"activeDeadlineSeconds": 200}), "Job", history, ["ns"])
    assert (from_history.p50, from_history.source) == (200.0, Source.NAMESPACE)
    bad = job_runtime(job({EXPECTED_RUNTIME_ANNOTATION: "never"}), "Job", history, ["ns"])
    assert bad.source is Source.NAMESPACE and "never" in bad.problem


def test_a_run_is_dated_by_its_earliest_pod_start_never_before_its_admission() -> None:
    assert running_since([130.0, 120.0], 100.0) == 120.0
    assert running_since([99.0], 99.6) == 99.6  # the pod's start is kept to the second only
    assert running_since([50.0], None) == 50.0
    assert running_since([], 100.0) is None

"""The burst bench's arithmetic (issue 21): failure kinds, percentiles and histogram quantiles it reports."""

from __future__ import annotations

import math

import pytest

from bench.burst_stats import (
    by_label,
    classify,
    delta,
    histogram_quantile,
    latency,
    ours,
    parse_samples,
    total,
)

TIMEOUT = (
    'Internal error occurred: failed calling webhook "jobs.mutate.example.io": failed to call webhook: Post '
    '"https://127.0.0.1:9443/mutate?timeout=5s": context deadline exceeded'
)
REFUSED = (
    'Internal error occurred: failed calling webhook "jobs.mutate.example.io": failed to call webhook: Post '
    '"https://127.0.0.1:9443/mutate?timeout=5s": dial tcp 127.0.0.1:9443: connect: connection refused'
)
DENIED = 'admission webhook "jobs.validate.example.io" denied the request: kube-queue is starting: caches not ready'


@pytest.mark.parametrize(
    ("status", "reason", "message", "kind"),
    [
        (500, "InternalError", TIMEOUT, "webhook timeout"),
        (500, "InternalError", REFUSED, "webhook unreachable"),
        (503, "ServiceUnavailable", DENIED, "webhook denied: kube-queue is starting: caches not ready"),
        (429, "TooManyRequests", "too many requests, please try again later", "HTTP 429 TooManyRequests"),
        (504, "Timeout", "the server was unable to return a response in the time allotted", "HTTP 504 Timeout"),
        (0, "Timeout", "POST /apis/batch/v1/namespaces/x/jobs: no answer in time", "client timeout"),
        (0, "ConnectionError", "POST /apis/batch/v1/namespaces/x/jobs: reset", "client connection"),
        (409, "AlreadyExists", 'jobs.batch "small-0001" already exists', "HTTP 409 AlreadyExists"),
    ],
)
def test_each_failure_has_its_kind(status: int, reason: str, message: str, kind: str) -> None:
    assert classify(status, reason, message) == kind


def test_only_webhook_failures_are_ours() -> None:
    assert ours(classify(500, "InternalError", TIMEOUT))
    assert ours(classify(403, "Forbidden", DENIED))
    assert not ours(classify(429, "TooManyRequests", "slow down"))
    assert not ours(classify(0, "Timeout", "no answer in time"))


def test_a_long_denial_is_trimmed_and_one_line() -> None:
    kind = classify(400, "BadRequest", DENIED + " and\n  much more " + "x" * 200)
    assert kind.startswith("webhook denied: kube-queue is starting")
    assert "\n" not in kind
    assert len(kind) == len("webhook denied: ") + 80


def test_latency_percentiles_in_milliseconds() -> None:
    summary = latency([index / 1000 for index in range(1, 101)])  # 1 ms ... 100 ms
    assert summary.count == 100
    assert summary.p50_ms == pytest.approx(51.0)
    assert summary.p99_ms == pytest.approx(99.0)
    assert summary.max_ms == pytest.approx(100.0)


def test_no_latency_is_nan_not_zero() -> None:
    summary = latency([])
    assert summary.count == 0
    assert math.isnan(summary.p99_ms)


METRICS_BEFORE = """\
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="false",le="0.005"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="false",le="0.1"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="false",le="1"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="false",le="+Inf"} 0
apiserver_admission_webhook_admission_duration_seconds_sum{name="a",rejected="false"} 0
apiserver_admission_webhook_admission_duration_seconds_count{name="a",rejected="false"} 0
# TYPE apiserver_admission_webhook_request_total counter
apiserver_admission_webhook_request_total{code="200",name="a",rejected="false"} 5
# TYPE other_total counter
other_total 3
"""

METRICS_AFTER = """\
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="false",le="0.005"} 50
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="false",le="0.1"} 90
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="false",le="1"} 98
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="false",le="+Inf"} 98
apiserver_admission_webhook_admission_duration_seconds_sum{name="a",rejected="false"} 9
apiserver_admission_webhook_admission_duration_seconds_count{name="a",rejected="false"} 98
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="true",le="0.005"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="true",le="0.1"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="true",le="1"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a",rejected="true",le="+Inf"} 2
apiserver_admission_webhook_admission_duration_seconds_count{name="a",rejected="true"} 2
apiserver_admission_webhook_admission_duration_seconds_count{name="b",rejected="false"} 7
# TYPE apiserver_admission_webhook_request_total counter
apiserver_admission_webhook_request_total{code="200",name="a",rejected="false"} 103
apiserver_admission_webhook_request_total{code="0",name="a",rejected="true"} 2
# TYPE other_total counter
other_total 9
"""

PREFIXES = ("apiserver_admission_webhook_",)


def _delta() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return delta(parse_samples(METRICS_BEFORE, PREFIXES), parse_samples(METRICS_AFTER, PREFIXES))


def test_only_the_asked_prefixes_are_kept() -> None:
    assert all(name.startswith(PREFIXES) for name, _ in parse_samples(METRICS_AFTER, PREFIXES))


def test_totals_and_label_sums_are_over_the_burst() -> None:
    samples = _delta()
    name = "apiserver_admission_webhook_admission_duration_seconds_count"
    assert total(samples, name) == 107
    assert total(samples, name, {"name": "a"}) == 100
    assert by_label(samples, name, "name") == {"a": 100, "b": 7}
    assert by_label(samples, "apiserver_admission_webhook_request_total", "code", {"name": "a"}) == {
        "200": 98, "0": 2}


def test_histogram_quantile_interpolates_inside_its_bucket() -> None:
    samples = _delta()
    name = "apiserver_admission_webhook_admission_duration_seconds"
    ok = {"name": "a", "rejected": "false"}
    # 50 of 98 in (0, 5 ms], 40 in (5, 100 ms], 8 in (100 ms, 1 s].
    assert histogram_quantile(samples, name, 0.5, ok) == pytest.approx(0.005 * 49 / 50)
    assert histogram_quantile(samples, name, 0.9, ok) == pytest.approx(0.005 + 0.095 * (88.2 - 50) / 40)
    assert histogram_quantile(samples, name, 0.99, ok) == pytest.approx(0.1 + 0.9 * (97.02 - 90) / 8)


def test_a_quantile_in_the_infinite_bucket_is_the_highest_finite_bound() -> None:
    samples = _delta()
    name = "apiserver_admission_webhook_admission_duration_seconds"
    assert histogram_quantile(samples, name, 0.99, {"name": "a", "rejected": "true"}) == 1.0
    # Both label sets together: 100 observations, the 99th is in the +Inf bucket as well.
    assert histogram_quantile(samples, name, 0.99, {"name": "a"}) == 1.0


def test_a_histogram_without_observations_has_no_quantile() -> None:
    samples = parse_samples(METRICS_BEFORE, PREFIXES)
    assert math.isnan(histogram_quantile(samples, "apiserver_admission_webhook_admission_duration_seconds", 0.99))
    assert math.isnan(histogram_quantile(samples, "no_such_histogram", 0.5))

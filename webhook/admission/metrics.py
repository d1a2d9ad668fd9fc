"""Prometheus metrics of the admission service (default registry; served by ``kq serve --metrics-port``).

* ``kube_queue_webhook_requests_total{endpoint, kind, decision}`` - decision is ``allowed``, ``patched``,
  ``denied``, ``bad_request`` or ``not_ready`` (refused before the caches listed);
* ``kube_queue_webhook_request_duration_seconds{endpoint}`` - time in the handler (decode, decide, encode).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REQUESTS = Counter(
    "kube_queue_webhook_requests",
    "Admission requests handled, by endpoint, object kind and decision.",
    ["endpoint", "kind", "decision"],
)
DURATION = Histogram(
    "kube_queue_webhook_request_duration_seconds",
    "Time to decide one admission request (decode, decide, encode).",
    ["endpoint"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)

_children: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}
"""The labelled series per (endpoint, kind, decision), looked up once: ``labels()`` validates and locks on
every call, which cost more than the rest of the bookkeeping on the request path."""


def observe(endpoint: str, kind: str, decision: str, seconds: float) -> None:
    """Count one request and record how long it took to decide."""
    key = (endpoint, kind, decision)
    series = _children.get(key)
    if series is None:
        series = _children[key] = (
            REQUESTS.labels(endpoint=endpoint, kind=kind, decision=decision),
            DURATION.labels(endpoint=endpoint),
        )
    series[0].inc()
    series[1].observe(seconds)

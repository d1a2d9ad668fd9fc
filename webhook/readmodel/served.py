"""The jobs as the controller serves them (docs/queueing.md, "Reading every job").

``kq serve`` answers an aggregated API, :data:`~webhook.api.names.VISIBILITY_GROUP`, with one summary a job: the
fields of ``kq list -o json``, built from its caches by the read model's own rules. Reading it costs one
answer of a few hundred bytes a job instead of every Job object and every pod; ``kq`` falls back to the API
when it is not served, not available, or not allowed to the user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from webhook.api.names import JOB_SUMMARIES, VISIBILITY_GROUP, VISIBILITY_VERSION
from webhook.readmodel.kubeapi import ApiError, KubeApi

REQUIRED = frozenset(("name", "namespace", "kind", "status"))
"""What every served summary has; an answer without them is not used."""
NOT_WAITING = "NotWaiting"
"""The controller's reason for no answer on a job that does not wait in a queue: ``kq`` explains it from its
namespace alone."""
NOT_DECIDED = "NotDecided"
"""Its reason for a waiting job its last pass or its last refresh of the start estimates did not see (or when its
replica makes neither): ``kq`` computes the answer from every job."""
SERVED_TIMEOUT_SECONDS = 10
"""How long the API server waits for ``kq serve`` (its ``timeout`` parameter) before ``kq`` reads the API
instead: a hung service costs this much, not the API server's minute."""


def summaries_path(namespace: str | None) -> str:
    """The path of the summaries of ``namespace`` (every namespace when ``None``)."""
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}{where}/{JOB_SUMMARIES}"


@dataclass(frozen=True, slots=True)
class Served:
    """The served summaries, or why there are none (``problem`` is ``None`` when the API is not registered:
    nothing to tell the user)."""

    jobs: list[dict[str, Any]] | None
    problem: str | None = None


def served_summaries(api: KubeApi, namespace: str | None) -> Served:
    """The summaries the controller serves, sorted by namespace, name and kind; none when it cannot give them
    (the API is not registered, its service is down or hung, the user may not list them, or the answer is not
    one), so the caller reads the API instead."""
    try:
        answer = api.request("GET", summaries_path(namespace), [("timeout", f"{SERVED_TIMEOUT_SECONDS}s")])
    except ApiError as error:
        return Served(None, None if error.status == 404 else error.one_line())
    items = answer.get("items") if isinstance(answer, Mapping) else None
    if not isinstance(items, list):
        return Served(None, "its answer has no items")
    jobs: list[dict[str, Any]] = []
    for item in items:
        job = item.get("job") if isinstance(item, Mapping) else None
        if type(job) is not dict or not job.keys() >= REQUIRED:
            return Served(None, "an item of its answer is not a job summary")
        jobs.append(job)
    jobs.sort(key=lambda job: (job["namespace"], job["name"], job["kind"]))
    return Served(jobs)


@dataclass(frozen=True, slots=True)
class ServedWhy:
    """The controller's answer for one job (``body``), or why there is none (``problem``; ``None`` when there is
    nothing to tell the user: the API is not registered, or the job is not found or ambiguous, which ``kq``'s own
    read says better)."""

    body: dict[str, Any] | None
    problem: str | None = None


def served_why(api: KubeApi, namespace: str, name: str, kind: str | None, *, width: int, ahead: int) -> ServedWhy:
    """The job's summary with why it waits, as the controller answers it (docs/queueing.md, "Why a job waits,
    from the controller")."""
    query = [("timeout", f"{SERVED_TIMEOUT_SECONDS}s"), ("width", str(width)), ("ahead", str(ahead))]
    if kind is not None:
        query.append(("kind", kind))
    try:
        answer = api.request("GET", f"{summaries_path(namespace)}/{quote(name, safe='')}", query)
    except ApiError as error:
        return ServedWhy(None, None if error.status in (404, 409) else error.one_line())
    job = answer.get("job") if isinstance(answer, Mapping) else None
    if type(job) is not dict or not job.keys() >= REQUIRED:
        return ServedWhy(None, "its answer is not a job summary")
    why, unexplained = answer.get("why"), answer.get("unexplained")
    if why is not None and not (type(why) is dict and isinstance(why.get("explanation"), str)):
        return ServedWhy(None, "its answer's explanation has no text")
    if why is None and not (type(unexplained) is dict and isinstance(unexplained.get("reason"), str)):
        return ServedWhy(None, "its answer has neither an explanation nor a reason for none")
    return ServedWhy(dict(answer))

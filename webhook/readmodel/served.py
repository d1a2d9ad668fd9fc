"""The jobs as the controller serves them (docs/queueing.md, "Reading every job").

``kq serve`` answers an aggregated API, :data:`~webhook.api.names.VISIBILITY_GROUP`, with one summary a job: the
fields of ``kq list -o json``, built from its caches by the read model's own rules. Reading it costs one
answer of a few hundred bytes a job instead of every Job object and every pod; ``kq`` falls back to the API
when it is not served, not available, or not allowed to the user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter
from urllib.parse import quote

from webhook.api.names import JOB_SUMMARIES, VISIBILITY_GROUP, VISIBILITY_VERSION
from webhook.api.objects import Obj
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

    jobs: list[Obj] | None
    problem: str | None = None


def served_summaries(api: KubeApi, namespace: str | None) -> Served:
    """The summaries the controller serves, sorted by namespace, name and kind; none when it cannot give them
    (the API is not registered, its service is down or hung, the user may not list them, or the answer is not
    one), so the caller reads the API instead."""
    try:
        answer = api.request("GET", summaries_path(namespace), [("timeout", f"{SERVED_TIMEOUT_SECONDS}s")])
    except ApiError as error:
        return Served(None, None if error.status == 404 else error.one_line())
    return _summaries(answer)


def _summaries(answer: object) -> Served:
    """The summaries of a list's answer, sorted (see :func:`served_summaries`)."""
    items = answer.get("items") if isinstance(answer, Mapping) else None
    if not isinstance(items, list):
        return Served(None, "its answer has no items")
    jobs: list[Obj] = []
    for item in items:
        job = item.get("job") if isinstance(item, Mapping) else None
        if type(job) is not dict or not job.keys() >= REQUIRED:
            return Served(None, "an item of its answer is not a job summary")
        jobs.append(job)
    jobs.sort(key=itemgetter("namespace", "name", "kind"))
    return Served(jobs)


Row = tuple[str, list[str]]
"""A job's namespace and every cell of its row of ``kq list``, in the order of
:data:`~webhook.readmodel.listing.COLUMNS`."""


@dataclass(frozen=True, slots=True)
class ServedRows:
    """The served jobs as rows of ``kq list`` (``rows``, in namespace, name and kind order), or as summaries
    (``summaries.jobs``, from a controller that serves no Table), or why neither (``summaries.problem``)."""

    rows: list[Row] | None
    summaries: Served


def served_rows(api: KubeApi, namespace: str | None) -> ServedRows:
    """The jobs the controller serves, as the rows it lays out for ``kubectl get`` (docs/queueing.md, "As a
    table"): about half the bytes of the summaries, and nothing left to compute but the layout."""
    query = [("timeout", f"{SERVED_TIMEOUT_SECONDS}s"), ("includeObject", "Metadata")]
    try:
        answer = api.table(summaries_path(namespace), query)
    except ApiError as error:
        return ServedRows(None, Served(None, None if error.status == 404 else error.one_line()))
    if not (isinstance(answer, Mapping) and answer.get("kind") == "Table"):
        return ServedRows(None, _summaries(answer))
    rows = _rows(answer)
    if rows is None:
        return ServedRows(None, Served(None, "its table is not kq list's"))
    return ServedRows(rows, Served(None))


def _rows(table: Mapping[str, object]) -> list[Row] | None:
    """The rows of a served Table, with the cells in the order of ``kq list``'s columns (``None``: a column is
    missing, or a row is not a row of strings with its namespace)."""
    from webhook.readmodel.listing import COLUMNS  # noqa: PLC0415

    definitions, rows = table.get("columnDefinitions"), table.get("rows")
    if not isinstance(definitions, list) or not isinstance(rows, list):
        return None
    names = [column.get("name") if isinstance(column, Mapping) else None for column in definitions]
    if not all(column.name in names for column in COLUMNS):
        return None
    index = [names.index(column.name) for column in COLUMNS]
    reorder = index != list(range(len(names)))
    out: list[Row] = []
    width = len(names)
    for row in rows:
        try:
            cells, namespace = row["cells"], row["object"]["metadata"]["namespace"]
            "".join(cells)  # raises unless every cell is a text
        except (KeyError, TypeError):
            return None
        if type(cells) is not list or len(cells) != width or type(namespace) is not str:
            return None
        out.append((namespace, [cells[at] for at in index] if reorder else cells))
    return out


@dataclass(frozen=True, slots=True)
class ServedWhy:
    """The controller's answer for one job (``body``), or why there is none (``problem``; ``None`` when there is
    nothing to tell the user: the API is not registered, or the job is not found or ambiguous, which ``kq``'s own
    read says better)."""

    body: Obj | None
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

"""The table of ``kq list``: its columns and the rule of each cell, one for the rows ``kq`` lays out from the jobs
it reads and for the Table (``meta.k8s.io/v1``) the controller's read API serves (docs/queueing.md, "Reading every
job", "As a table").

A row's cells split in two: those that move with neither the clock nor a pass (:func:`fixed_cells`: name, kind,
status, queue, priority, pods, request), which ``kq serve`` keeps with each job's summary, and those made at the
read (:func:`cells`: the position, the ETA and the age).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from webhook.api.objects import Obj, parse_time
from webhook.readmodel.output import Column, age, describe, eta_text


@dataclass(frozen=True, slots=True)
class ListColumn:
    """A column of ``kq list``: how it is laid out, its name in a Table, whether only ``-o wide`` shows it (a
    Table's ``priority`` 1, as ``kubectl get -o wide``), and what it says."""

    column: Column
    name: str
    wide: bool
    description: str


NAMESPACE = Column("NAMESPACE", shrink=3, min_width=9)
"""The first column of ``kq list -A`` (a Table leaves it to the reader, who takes it from each row's object)."""
COLUMNS = (
    ListColumn(Column("NAME", shrink=4, min_width=12), "Name", False, "The job's name"),
    ListColumn(Column("KIND", shrink=5), "Kind", False, "The job's kind"),
    ListColumn(Column("STATUS"), "Status", False,
               "QUEUING, BACKOFF, PENDING, RUNNING, SUCCEEDED, FAILED or SUSPENDED (docs/queueing.md)"),
    ListColumn(Column("QUEUE", shrink=2, min_width=8), "Queue", False, "The leaf quota whose queue holds the job"),
    ListColumn(Column("POSITION", right=True), "Position", False, "The waiting job's 1-based place in its queue"),
    ListColumn(Column("ETA", right=True), "ETA", False,
               "When the waiting job should start: ~12m estimated, <20m at the latest, ? unknown (docs/eta.md)"),
    ListColumn(Column("PRIORITY", right=True), "Priority", True, "The job's priority"),
    ListColumn(Column("PODS", right=True), "Pods", True, "Running pods of those the job expects"),
    ListColumn(Column("REQUEST", shrink=1), "Request", True, "What the job asks of its quota"),
    ListColumn(Column("AGE", right=True), "Age", False, "Time since the job was created"),
)
STATUS_CELL = 2
"""Where a row's status is (``kq list --status``)."""


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


_DESCRIBED: dict[tuple[tuple[str, object], ...], str] = {}
"""The request cells already written, by the request's quantities (jobs ask alike: ``kq serve`` writes one for each
job it summarises)."""
DESCRIBED_KEPT = 4096
"""How many request cells are kept at most (the ones after are written each time)."""


def _request_cell(request: object) -> str:
    if not isinstance(request, Mapping):
        return "-"
    from webhook.core.resources import Resources  # noqa: PLC0415

    try:
        key = tuple(request.items())
        text = _DESCRIBED.get(key)
    except TypeError:  # a quantity that is not one: written, not kept
        return describe(Resources.parse(request))
    if text is None:
        text = describe(Resources.parse(request))
        if len(_DESCRIBED) < DESCRIBED_KEPT:
            _DESCRIBED[key] = text
    return text


def fixed_cells(job: Obj) -> list[str]:
    """The cells of a job (as ``kq list -o json`` gives it) that move with neither the clock nor a pass: name,
    kind, status, queue, priority, pods and request."""
    pods = job.get("pods")
    counts = f"{pods.get('running', 0)}/{pods.get('expected', 0)}" if isinstance(pods, dict) else "0/0"
    return [str(job["name"]), str(job["kind"]), str(job["status"]), _cell(job.get("leaf")),
            str(job.get("priority", 0)), counts, _request_cell(job.get("request"))]


def cells(fixed: Sequence[str], position: object, estimates: Mapping[str, object], created: float | None,
          now: float) -> list[str]:
    """Every cell of a row, in the order of :data:`COLUMNS`: the fixed ones, with the position, the ETA from the
    estimates (``estimatedStart``, ``estimatedStartLatest``) and the age at ``now``."""
    name, kind, status, queue, priority, pods, request = fixed
    eta = eta_text(status, estimates.get("estimatedStart"), estimates.get("estimatedStartLatest"), now)
    return [name, kind, status, queue, _cell(position), eta, priority, pods, request, age(created, now)]


def job_cells(job: Obj, now: float) -> list[str]:
    """Every cell of a job's row (as ``kq list -o json`` gives the job)."""
    return cells(fixed_cells(job), job.get("position"), job, parse_time(job.get("created")), now)


def select(rows: Iterable[tuple[str, Sequence[str]]], *, wide: bool, all_namespaces: bool) -> tuple[
        list[Column], list[tuple[str, ...]]]:
    """The columns and rows ``kq list`` shows from each job's namespace and every cell of its row."""
    shown = [index for index, column in enumerate(COLUMNS) if wide or not column.wide]
    columns = ([NAMESPACE] if all_namespaces else []) + [COLUMNS[index].column for index in shown]
    pick = itemgetter(*shown)
    if all_namespaces:
        return columns, [(namespace, *pick(row)) for namespace, row in rows]
    return columns, [pick(row) for _, row in rows]


def list_rows(summaries: Sequence[Obj], now: float, *, wide: bool, all_namespaces: bool) -> tuple[
        list[Column], list[tuple[str, ...]]]:
    """The columns and rows of ``kq list`` from the jobs as ``-o json`` gives them (:func:`job_summary`, or the
    controller's served summaries); ETA is when a waiting job should start (docs/eta.md)."""
    return select(((str(job["namespace"]), job_cells(job, now)) for job in summaries), wide=wide,
                  all_namespaces=all_namespaces)


def table_columns() -> list[dict[str, str | int]]:
    """The ``columnDefinitions`` of the Table the read API serves."""
    return [{"name": column.name, "type": "string", "format": "name" if column.name == "Name" else "",
             "description": column.description, "priority": 1 if column.wide else 0} for column in COLUMNS]

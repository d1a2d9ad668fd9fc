"""The jobs as ``kq serve`` serves them from the controller's caches: one summary a job, the fields of
``kq list -o json`` (docs/queueing.md, "Reading every job"; the routes: :mod:`webhook.cli.readapi`).

A summary is the read model's own :func:`~webhook.readmodel.view.job_view` and
:func:`~webhook.readmodel.jobs.job_summary` over the controller's caches, so it says what ``kq`` computes from
the API. Building every job's view costs some 30 microseconds a job, so each job's summary is kept, encoded,
until its object, its sizing, its running pods, the tree, the PriorityClasses or the devices change; a read
then only adds each waiting job's position and start estimate. With the summary, each job keeps the cells of its row of
``kq list`` that move with neither the clock nor a pass (:func:`~webhook.readmodel.listing.fixed_cells`), so the
same jobs are served as a Table (:meth:`SummaryBook.table_chunks`). :class:`SummaryInputs` hold references to the
caches' objects; ``kq serve`` takes them on the controller's loop and builds the answer in a worker thread. It also
keeps the book warm between reads (:meth:`SummaryBook.warm`), so even the first read finds the summaries built.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import NotRequired, TypedDict

import orjson

from webhook.api.names import JOB_SUMMARY_KIND, VISIBILITY_GROUP, VISIBILITY_VERSION
from webhook.api.objects import Doc, Obj, mapping, name_of, namespace_of
from webhook.api.statuses import JobStatus
from webhook.controller.model import TrackedJob
from webhook.core.queueing import positions_only
from webhook.core.workload import Workload, WorkloadError, WorkloadKey
from webhook.kube.packed import Codec
from webhook.readmodel.jobs import job_summary
from webhook.readmodel.listing import cells, fixed_cells, job_cells, table_columns
from webhook.readmodel.view import KindSource, ViewContext, job_view
from webhook.workloads.base import value_at

API_VERSION = f"{VISIBILITY_GROUP}/{VISIBILITY_VERSION}"
CHUNK_ITEMS = 2000
"""Items a piece of the answer holds (about a MB)."""
WARM_BUILDS = 500
"""Summaries a warm-up builds between two calls of its ``between`` (some 15 to 35 ms)."""
OwnerKey = tuple[str, str, str]
"""``(namespace, owner kind, owner name)`` of a pod's controller."""
ROW_MARK = b"\n"
"""Parts a job's packed summary from its row's fixed cells (encoded JSON holds no raw line end)."""
INCLUDE_OBJECT = ("None", "Metadata", "Object")
"""What each row of a Table carries besides its cells (Kubernetes' ``includeObject``): nothing, the job's name and
namespace (the default: ``kubectl get -A`` reads the namespace there), or the whole summary."""
META_V1 = "meta.k8s.io/v1"


class TableHead(TypedDict):
    """What a Table (``meta.k8s.io/v1``) starts with."""

    apiVersion: str
    kind: str
    metadata: Doc


class TableRow(TypedDict):
    """A row of a Table: its cells, and what ``includeObject`` asks of the job."""

    cells: list[str]
    object: NotRequired[Obj]


class Table(TableHead):
    """A Table (``meta.k8s.io/v1``) of jobs."""

    columnDefinitions: list[dict[str, str | int]]
    rows: list[TableRow]


TABLE_HEAD: TableHead = {"apiVersion": META_V1, "kind": "Table", "metadata": {}}
ROW_OBJECT = {"apiVersion": META_V1, "kind": "PartialObjectMetadata"}
"""What a row's object is with ``includeObject=Metadata``, its ``metadata`` apart."""
ROW_OBJECT_HEAD = orjson.dumps(ROW_OBJECT)[:-1] + b',"metadata":'


@dataclass(frozen=True, slots=True)
class SummaryInputs:
    """What the summaries read, from the controller's caches (references only)."""

    jobs: Sequence[tuple[KindSource, Obj, TrackedJob | str | None]]
    """Every cached job with how the last pass sized exactly that object (``None``: it did not)."""
    running: Mapping[OwnerKey, int]
    """Running pods per controller owner."""
    context: ViewContext
    positions: Mapping[WorkloadKey, int] | None
    """The waiting jobs' positions as the last pass decided them (``None``: this replica does not decide)."""
    estimates: Mapping[WorkloadKey, Mapping[str, str]]
    """The start estimates the controller publishes (``estimatedStart``, ``estimatedStartLatest``)."""


@dataclass(frozen=True, slots=True)
class _Kept:
    """One job's summary, packed, and what it was built from."""

    obj: Obj
    sized: TrackedJob | str | None
    owners: tuple[OwnerKey, ...] | None
    """Its pods' owners (``None``: the job itself, as for most kinds)."""
    running: int
    waiting: Workload | None
    """Its workload while it is QUEUING (its key finds its position and estimates)."""
    namespace: str
    name: str
    kind: str
    body: bytes
    """The item without its position, its estimates and its two closing braces, then :data:`ROW_MARK` and its row's
    fixed cells with its creation time (a JSON list), packed by the book's codec."""
    kept: bool
    """Whether it may be read again while its inputs stay: not with a backoff note, whose state moves with the
    clock alone."""


def owners_of(source: KindSource, obj: Obj) -> tuple[OwnerKey, ...] | None:
    """The controllers of the job's pods (``None``: the job itself, as for most kinds)."""
    namespace, kind, name = namespace_of(obj), source.adapter.kind, name_of(obj)
    try:
        owners = tuple((namespace, owner_kind, owner) for owner_kind, owner in source.adapter.pod_owners(obj))
    except WorkloadError:
        return ()
    return None if owners == ((namespace, kind, name),) else owners


def running_of(source: KindSource, obj: Obj, owners: tuple[OwnerKey, ...] | None,
             running: Mapping[OwnerKey, int]) -> int:
    """How many of the job's pods run (``running``: running pods per controller owner)."""
    if source.adapter.kind == "Pod":
        return 1 if value_at(obj, "status", "phase") == "Running" else 0
    if not running:
        return 0
    if owners is None:
        return running.get((namespace_of(obj), source.adapter.kind, name_of(obj)), 0)
    return sum(running.get(owner, 0) for owner in owners)


def _build(source: KindSource, obj: Obj, sized: TrackedJob | str | None, owners: tuple[OwnerKey, ...] | None, *,
           running: int, context: ViewContext, codec: Codec) -> _Kept:
    view = job_view(source, obj, (), running, context, sized=sized)
    summary = job_summary(view)
    summary.pop("position", None)
    # The list names the items' kind and version once, as Kubernetes' own lists do (kubectl fills them in).
    item = {"metadata": {"name": view.name, "namespace": view.namespace}, "job": summary}
    waiting = view.workload if view.status == JobStatus.QUEUING and view.leaf is not None else None
    row = orjson.dumps([*fixed_cells(summary), view.created or None])
    return _Kept(obj, sized, owners, running, waiting, view.namespace, view.name, view.kind,
                 codec.pack(orjson.dumps(item)[:-2] + ROW_MARK + row), kept=view.backoff is None)


class SummaryBook:
    """Every job's summary, kept between reads (see the module); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[int, _Kept] = {}
        """By the id of the job's cached object (the object is held in the entry, so the id stays its own)."""
        self._context: ViewContext | None = None
        self._codec = Codec()
        self.rebuilt = 0
        """How many summaries the last read built (the others were kept)."""
        """Packs the summaries (some 400 bytes of JSON each, about 100 packed), the first one its dictionary."""

    def __len__(self) -> int:
        return len(self._kept)

    def render(self, inputs: SummaryInputs, namespace: str | None = None) -> tuple[bytes, int]:
        """The ``JobSummaryList`` of ``namespace`` (every namespace when ``None``) as JSON, and how many items."""
        chunks, count = self.render_chunks(inputs, namespace)
        return b"".join(chunks), count

    def render_chunks(self, inputs: SummaryInputs, namespace: str | None = None,
                      per_chunk: int = CHUNK_ITEMS) -> tuple[list[bytes], int]:
        """:meth:`render` in pieces of ``per_chunk`` items, to be written one after the other (the answer is
        never whole in memory: some 20 MB at 50,000 jobs)."""
        with self._lock:
            kept = self._refresh(inputs)
        positions = self._positions(kept, inputs.positions)
        unpack = self._codec.unpack
        head = orjson.dumps({"apiVersion": API_VERSION, "kind": f"{JOB_SUMMARY_KIND}List", "metadata": {}})
        parts = (_item(entry, unpack(entry.body).partition(ROW_MARK)[0], positions, inputs.estimates)
                 for entry in kept if namespace is None or entry.namespace == namespace)
        return _chunked(head[:-1] + b',"items":[', parts, per_chunk)

    def table_chunks(self, inputs: SummaryInputs, namespace: str | None, now: float, include: str = "Metadata",
                     per_chunk: int = CHUNK_ITEMS) -> tuple[list[bytes], int]:
        """The jobs of ``namespace`` (every namespace when ``None``) as a Table (``meta.k8s.io/v1``, what ``kubectl
        get`` asks for): the columns of ``kq list -o wide`` (:mod:`webhook.readmodel.listing`), the ages and
        estimates at ``now``, the rows in namespace, name and kind order, each with what ``include`` names (one of
        :data:`INCLUDE_OBJECT`); in pieces as :meth:`render_chunks`."""
        with self._lock:
            kept = self._refresh(inputs)
        positions = self._positions(kept, inputs.positions)
        shown = sorted((entry for entry in kept if namespace is None or entry.namespace == namespace),
                       key=attrgetter("namespace", "name", "kind"))
        unpack, estimates = self._codec.unpack, inputs.estimates
        head = orjson.dumps({**TABLE_HEAD, "columnDefinitions": table_columns()})

        def row(entry: _Kept) -> bytes:
            body, _, tail = unpack(entry.body).partition(ROW_MARK)
            fixed = orjson.loads(tail)
            waiting = entry.waiting
            position: int | None
            given: Mapping[str, str]
            if waiting is None:
                position, given = None, {}
            else:
                position, given = positions.get(waiting.key), estimates.get(waiting.key, {})
            made = b'{"cells":' + orjson.dumps(cells(fixed[:-1], position, given, fixed[-1], now))
            if include == "None":
                return made + b"}"
            if include == "Metadata":
                meta = orjson.dumps({"name": fixed[0], "namespace": entry.namespace})
                return made + b',"object":' + ROW_OBJECT_HEAD + meta + b"}}"
            return made + b',"object":' + ITEM_HEAD + _item(entry, body, positions, estimates)[1:] + b"}"

        return _chunked(head[:-1] + b',"rows":[', map(row, shown), per_chunk)

    def warm(self, inputs: SummaryInputs, between: Callable[[], bool]) -> int:
        """Build the summaries a read would build, ahead of it, and answer nothing; how many it built.
        ``between()`` is called after every :data:`WARM_BUILDS` builds: it may wait (so the warm-up takes a
        share of the interpreter only), and ``False`` stops the building: the summaries not built yet are left to
        the next read, those kept stay."""
        with self._lock:
            self._refresh(inputs, between)
        return self.rebuilt

    def _refresh(self, inputs: SummaryInputs, between: Callable[[], bool] | None = None) -> list[_Kept]:
        """Every job's entry, built where its inputs changed; with ``between``, a warm-up (:meth:`warm`): the
        entries it does not build are left out."""
        context = inputs.context
        previous = self._context
        if previous is None or previous.tree is not context.tree or (
                previous.priority_classes is not context.priority_classes) or previous.devices is not context.devices:
            self._kept = {}
        self._context = context
        old, new = self._kept, {}
        out = []
        built = 0
        building = True
        for source, obj, sized in inputs.jobs:
            entry = old.get(id(obj))
            if entry is not None and entry.kept and entry.obj is obj and entry.sized is sized:
                owners = entry.owners
                running = running_of(source, obj, owners, inputs.running)
                if running == entry.running:
                    new[id(obj)] = entry
                    out.append(entry)
                    continue
            else:
                owners = owners_of(source, obj)
                running = running_of(source, obj, owners, inputs.running)
            if not building:
                continue
            entry = _build(source, obj, sized, owners, running=running, context=context, codec=self._codec)
            built += 1
            if between is not None and built % WARM_BUILDS == 0:
                building = between()
            if entry.kept:
                new[id(obj)] = entry
            out.append(entry)
        self._kept = new
        self.rebuilt = built
        return out

    @staticmethod
    def _positions(kept: Sequence[_Kept], decided: Mapping[WorkloadKey, int] | None) -> Mapping[WorkloadKey, int]:
        """The last pass's positions where they cover every waiting job of the quota, else the core's queue order
        over the waiting jobs (the read model's rule: :func:`webhook.readmodel.view.with_positions`)."""
        by_quota: dict[str, list[Workload]] = {}
        for entry in kept:
            if entry.waiting is not None:
                by_quota.setdefault(entry.waiting.quota, []).append(entry.waiting)
        out: dict[WorkloadKey, int] = {}
        for workloads in by_quota.values():
            if decided is not None and all(workload.key in decided for workload in workloads):
                out.update((workload.key, decided[workload.key]) for workload in workloads)
            else:
                out.update(positions_only(workloads))
        return out




ITEM_HEAD = orjson.dumps({"apiVersion": API_VERSION, "kind": JOB_SUMMARY_KIND})[:-1] + b","


def _item(entry: _Kept, body: bytes, positions: Mapping[WorkloadKey, int],
          estimates: Mapping[WorkloadKey, Mapping[str, str]]) -> bytes:
    """A job's item of the list: its summary (``body``, unpacked) with its position and start estimates."""
    waiting = entry.waiting
    extra = {"position": None} if waiting is None else {
        "position": positions.get(waiting.key), **estimates.get(waiting.key, {})}
    return body + b"," + orjson.dumps(extra)[1:] + b"}"


def one_row_table(answer: Obj, now: float, include: str) -> Table:
    """The answer for one job (its summary under ``job``) as a Table of one row, as :meth:`SummaryBook.table_chunks`
    makes each."""
    job = mapping(answer["job"])
    row: TableRow = {"cells": job_cells(job, now)}
    if include == "Metadata":
        row["object"] = {**ROW_OBJECT, "metadata": {"name": job["name"], "namespace": job["namespace"]}}
    elif include == "Object":
        row["object"] = answer
    return {**TABLE_HEAD, "columnDefinitions": table_columns(), "rows": [row]}


def _chunked(head: bytes, parts: Iterable[bytes], per_chunk: int) -> tuple[list[bytes], int]:
    """A JSON object from ``head`` (it opens the array) and the array's ``parts``, in pieces of ``per_chunk``
    parts, and how many parts."""
    chunks, batch, count = [head], [], 0
    for part in parts:
        batch.append(part)
        count += 1
        if len(batch) == per_chunk:
            chunks.append((b"," if count > per_chunk else b"") + b",".join(batch))
            batch = []
    if batch:
        chunks.append((b"," if count > len(batch) else b"") + b",".join(batch))
    chunks.append(b"]}")
    return chunks, count

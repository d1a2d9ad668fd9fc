"""Scenario files: the quota tree, the nodes, the settings and a timeline of job submissions.

A scenario is one YAML file, usually of several documents (``---``). Every document is one of:

* ``kind: Scenario`` (``apiVersion: sim.kube-queue.x-k8s.io/v1alpha1``), at most one: the settings, the nodes, files to
  include and a list of job submissions (see :func:`parse_scenario` for every field);
* ``kind: ElasticQuotaTree``: exactly one in the scenario (its ``spec`` is read as the controller reads it);
* ``kind: PriorityClass``: name -> value, as the controller's priority lookup;
* ``kind: Queue``: its ``spec.queuePolicy`` counts as the cluster's Queue of that name does;
* ``kind: Namespace``: accepted and ignored (so the seed's files can be included as they are);
* any job kind the workload adapters know (batch ``Job``, ``PyTorchJob``, ``TFJob``, ``MPIJob``, ``RayJob``,
  ``Pod``): one submission, timed by its annotations ``sim.kube-queue.x-k8s.io/submit-at`` (default ``0s``),
  ``sim.kube-queue.x-k8s.io/run-for`` (default: runs until the end), ``sim.kube-queue.x-k8s.io/count`` (default 1) and
  ``sim.kube-queue.x-k8s.io/every`` (spacing of the copies, default ``0s``) and ``sim.kube-queue.x-k8s.io/never-starts``
  (``"true"``: its pods never run, so the start timeout backs it off).

Durations are Go-style (``1h2m3.5s``, ``200ms``, ``90s``, ``1d``) or bare numbers of seconds; ``forever`` (or no
``run-for``) means the job runs until the end of the simulation. Internally time is an integer count of
microseconds, so ``0.1s + 0.2s`` lands exactly on ``0.3s`` and events at equal times coincide.

A job without ``metadata.name`` gets ``generateName`` plus a five-digit sequence number (``pi-00001``), so runs
are reproducible. Everything here is pure: reading files is :func:`load_scenario`'s only I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import yaml

from webhook.api.names import LEGACY_SIM_GROUP, SIM_GROUP
from webhook.api.objects import Doc, Obj
from webhook.core.queueing import Policy, QueuePolicyError
from webhook.core.quota import QuotaTree, QuotaTreeError, parse_tree, queue_name
from webhook.core.rate import DEFAULT_OVERSELL_RATE, RateError, parse_rate
from webhook.core.resources import ResourceError, Resources
from webhook.core.startup import BackoffPolicy
from webhook.sim.model import (
    COUNT_ANNOTATION,
    EVERY_ANNOTATION,
    LEGACY_SIM_ANNOTATIONS,
    MAX_INCLUDE_DEPTH,
    MAX_JOBS_PER_SCENARIO,
    MICROS,
    NEVER_STARTS_ANNOTATION,
    RUN_FOR_ANNOTATION,
    SIM_ANNOTATIONS,
    SUBMIT_AT_ANNOTATION,
    NodeShape,
    Scenario,
    ScenarioError,
    Submission,
    parse_duration,
    parse_run_for,
)
from webhook.workloads.registry import adapter_for

# Reading ----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Doc:
    body: Obj
    where: str
    base: Path


def _read_docs(path: Path, depth: int = 0) -> list[_Doc]:
    if depth > MAX_INCLUDE_DEPTH:
        raise ScenarioError(f"{path}: includes nest deeper than {MAX_INCLUDE_DEPTH} levels; is there a cycle?")
    try:
        text = path.read_text()
    except OSError as error:
        raise ScenarioError(f"cannot read scenario file {path}: {error.strerror or error}") from None
    return _docs_from_text(text, str(path), path.parent)


def _docs_from_text(text: str, name: str, base: Path) -> list[_Doc]:
    try:
        loaded = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        raise ScenarioError(f"{name}: not valid YAML: {error}") from None
    docs: list[_Doc] = []
    for index, body in enumerate(loaded, start=1):
        if body is None:
            continue
        where = f"{name}#{index}"
        if not isinstance(body, Mapping):
            raise ScenarioError(f"{where}: expected a Kubernetes object (a mapping with kind), got {body!r}")
        if body.get("kind") == "List" and isinstance(body.get("items"), list):
            for item_index, item in enumerate(body["items"]):
                if not isinstance(item, Mapping):
                    raise ScenarioError(f"{where} items[{item_index}]: expected an object, got {item!r}")
                docs.append(_Doc(item, f"{where} items[{item_index}]", base))
            continue
        docs.append(_Doc(body, where, base))
    return docs


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario file (and the files it includes); :class:`ScenarioError` says what is wrong."""
    path = Path(path)
    return parse_scenario(_read_docs(path), default_name=path.stem, reader=_read_docs)


def scenario_from_text(text: str, name: str = "scenario", base: Path | None = None) -> Scenario:
    """A scenario from YAML text (includes are resolved against ``base``, default the current directory)."""
    return parse_scenario(_docs_from_text(text, name, base or Path()), default_name=name, reader=_read_docs)


def scenario_from_objects(objects: Sequence[Obj], name: str = "scenario") -> Scenario:
    """A scenario from already-parsed documents (generators, tests); no file is read."""
    docs = [_Doc(obj, f"{name}#{index}", Path()) for index, obj in enumerate(objects, start=1)]
    return parse_scenario(docs, default_name=name, reader=_read_docs)


# Parsing ----------------------------------------------------------------------------------------------------

_SCENARIO_FIELDS = {"oversellrate", "strictPriority", "queuePolicy", "queuePolicies", "until", "nodes", "include",
                    "jobs", "description", "startTimeout", "backoffBase", "backoffMax", "backoffLimit"}
_JOB_FIELDS = {"file", "manifest", "at", "runFor", "count", "every", "neverStarts"}


def _kind(body: Obj) -> tuple[str, str]:
    api_version = body.get("apiVersion")
    kind = body.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ValueError("every document needs a kind")
    group = api_version.rsplit("/", 1)[0] if isinstance(api_version, str) and "/" in api_version else ""
    return group, kind


def _rate(value: object, where: str) -> Fraction:
    try:
        return parse_rate(value)
    except RateError as error:
        raise ScenarioError(f"{where}: {error}") from None


def _policy(value: object, where: str) -> Policy:
    if value is not None and not isinstance(value, str):
        raise ScenarioError(f"{where}: expected Round, Priority or Block, got {value!r}")
    try:
        return Policy.parse(value)
    except QueuePolicyError as error:
        raise ScenarioError(f"{where}: {error}") from None


def _count(value: object, where: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScenarioError(f"{where}: count must be a whole number of copies (0 or more), got {value!r}")
    return value


def _nodes(raw: object, where: str) -> tuple[NodeShape, ...]:
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, Mapping) else raw
    if not isinstance(items, list):
        raise ScenarioError(f"{where}: nodes must be a list of shapes such as {{count: 4, cpu: 32, memory: 128Gi}}")
    shapes: list[NodeShape] = []
    for index, item in enumerate(items):
        here = f"{where}[{index}]"
        if not isinstance(item, Mapping):
            raise ScenarioError(f"{here}: expected a node shape such as {{count: 4, cpu: 32, memory: 128Gi}}")
        count = _count(item.get("count", 1), here)
        name = item.get("name", f"node{index}" if len(items) > 1 else "node")
        if not isinstance(name, str) or not name:
            raise ScenarioError(f"{here}: name must be a non-empty string")
        spec = {key: value for key, value in item.items() if key not in ("count", "name")}
        if not spec:
            raise ScenarioError(f"{here}: give the node's allocatable resources, such as cpu: 32, memory: 128Gi")
        try:
            allocatable = Resources.parse(spec)
        except ResourceError as error:
            raise ScenarioError(f"{here}: {error}") from None
        shapes.append(NodeShape(name=name, count=count, allocatable=allocatable))
    return tuple(shapes)


def _annotations(body: Obj) -> Obj:
    """The manifest's annotations, with the legacy ``sim.kube-queue.io/*`` names read as the current ones (a
    current name wins over its legacy spelling)."""
    metadata = body.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return {}
    legacy = {LEGACY_SIM_ANNOTATIONS[key]: value for key, value in annotations.items() if key in LEGACY_SIM_ANNOTATIONS}
    return {**legacy, **annotations} if legacy else annotations


@dataclass(slots=True)
class _JobEntry:
    body: Obj
    where: str
    at: int
    run_for: int | None
    count: int
    every: int
    never_starts: bool = False


def _flag(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ScenarioError(f"{where}: expected true or false, got {value!r}")


def _entry_from_manifest(body: Obj, where: str, overrides: Obj) -> _JobEntry:
    annotations = _annotations(body)

    def pick(field_name: str, annotation: str, default: object) -> object:
        if field_name in overrides:
            return overrides[field_name]
        return annotations.get(annotation, default)

    return _JobEntry(
        body=body,
        where=where,
        at=parse_duration(pick("at", SUBMIT_AT_ANNOTATION, 0), f"{where}: submit time"),
        run_for=parse_run_for(pick("runFor", RUN_FOR_ANNOTATION, None), f"{where}: run time"),
        count=_count(pick("count", COUNT_ANNOTATION, 1), where),
        every=parse_duration(pick("every", EVERY_ANNOTATION, 0), f"{where}: every"),
        never_starts=_flag(pick("neverStarts", NEVER_STARTS_ANNOTATION, False), f"{where}: never-starts"),
    )


Reader = Callable[[Path, int], list[_Doc]]
"""``(path, depth) -> documents``: how included files are read."""


def parse_scenario(docs: Sequence[_Doc], *, default_name: str, reader: Reader) -> Scenario:
    """Build a :class:`Scenario` from documents (see the module docstring for the kinds).

    The ``Scenario`` document's ``spec`` (every field optional):

    * ``oversellrate``: the controller's ``--oversellrate`` (default 2; 1 = strictly by quota);
    * ``strictPriority``: the controller's ``StrictPriority=true`` (every queue ``Block``);
    * ``queuePolicy``: every Queue's ``spec.queuePolicy`` (``Round``, the default, or ``Block``);
      ``queuePolicies``: per leaf name, overriding it;
    * ``until``: stop the virtual clock there (default: at the last event);
    * ``nodes``: node shapes ``[{name: ecs, count: 4, cpu: 32, memory: 128Gi, nvidia.com/gpu: 4, pods: 110}]``
      (default: node capacity is not modelled);
    * ``include``: files (relative to this one) whose documents join the scenario;
    * ``jobs``: submissions ``{file: jobs/pi.yaml | manifest: {...}, at: 0s, runFor: 60s, count: 1, every: 1s,
      neverStarts: false}`` (fields given here win over the manifest's ``sim.kube-queue.x-k8s.io/*`` annotations);
    * ``startTimeout`` (default ``5m``, ``0`` = off), ``backoffBase`` (``1m``), ``backoffMax`` (``30m``),
      ``backoffLimit`` (``0`` = never give up): the controller's start timeout and backoff flags.
    """
    queue_docs: list[_Doc] = []
    tree_docs: list[_Doc] = []
    priority_classes: dict[str, int] = {}
    entries: list[_JobEntry] = []
    settings: Obj | None = None
    settings_where = ""
    name = default_name
    pending: list[tuple[_Doc, int]] = [(doc, 0) for doc in docs]
    pending.reverse()
    while pending:
        doc, depth = pending.pop()
        body, where = doc.body, doc.where
        try:
            group, kind = _kind(body)
        except ValueError as error:
            kinds = "ElasticQuotaTree, PriorityClass, Queue, Scenario or a job"
            raise ScenarioError(f"{where}: {error} ({kinds})") from None
        if kind == "Scenario" and group in (SIM_GROUP, LEGACY_SIM_GROUP):
            if settings is not None:
                raise ScenarioError(f"{where}: a second Scenario document (the first is {settings_where}); keep one")
            spec = body.get("spec", {})
            if not isinstance(spec, Mapping):
                raise ScenarioError(f"{where}: spec must be a mapping of settings")
            unknown = sorted(set(spec) - _SCENARIO_FIELDS)
            if unknown:
                raise ScenarioError(
                    f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(_SCENARIO_FIELDS))}"
                )
            settings, settings_where = spec, where
            metadata = body.get("metadata")
            if isinstance(metadata, Mapping) and isinstance(metadata.get("name"), str):
                name = metadata["name"]
            included: list[tuple[_Doc, int]] = []
            for index, item in enumerate(spec.get("include") or ()):
                if not isinstance(item, str):
                    raise ScenarioError(f"{where}: include[{index}] must be a file path, got {item!r}")
                included.extend((child, depth + 1) for child in reader(doc.base / item, depth + 1))
            jobs = spec.get("jobs") or []
            if not isinstance(jobs, list):
                raise ScenarioError(f"{where}: jobs must be a list of {{file|manifest, at, runFor, count, every}}")
            for index, item in enumerate(jobs):
                entries.extend(_wrapper_entries(item, f"{where} jobs[{index}]", doc.base, reader, depth))
            pending.extend(reversed(included))
        elif kind == "ElasticQuotaTree":
            tree_docs.append(doc)
        elif kind == "PriorityClass":
            value = body.get("value")
            metadata = body.get("metadata") or {}
            pc_name = metadata.get("name") if isinstance(metadata, Mapping) else None
            if not isinstance(pc_name, str) or isinstance(value, bool) or not isinstance(value, int):
                raise ScenarioError(f"{where}: a PriorityClass needs metadata.name and an integer value")
            priority_classes[pc_name] = value
        elif kind == "Queue":
            queue_docs.append(doc)
        elif kind == "Namespace":
            continue
        elif adapter_for(group, kind) is not None:
            entries.append(_entry_from_manifest(body, where, {}))
        else:
            raise ScenarioError(
                f"{where}: kind {kind!r} ({group or 'core'}) is neither a supported job kind nor a scenario object "
                "(ElasticQuotaTree, PriorityClass, Queue, Namespace, Scenario)"
            )

    if len(tree_docs) != 1:
        found = ", ".join(doc.where for doc in tree_docs) or "none"
        raise ScenarioError(f"a scenario needs exactly one ElasticQuotaTree document (found: {found})")
    tree_doc = tree_docs[0]
    spec = tree_doc.body.get("spec")
    try:
        tree = parse_tree(spec if isinstance(spec, Mapping) else {})
    except QuotaTreeError as error:
        raise ScenarioError(f"{tree_doc.where}: the ElasticQuotaTree is invalid: {error}") from None

    settings = settings or {}
    oversell = _rate(settings["oversellrate"], settings_where) if "oversellrate" in settings else (
        DEFAULT_OVERSELL_RATE
    )
    strict = settings.get("strictPriority", False)
    if not isinstance(strict, bool):
        raise ScenarioError(f"{settings_where}: strictPriority must be true or false, got {strict!r}")
    until = settings.get("until")
    queues = _queues(tree, settings, settings_where, queue_docs)
    submissions = _submissions(tree, entries, priority_classes)
    description = settings.get("description", "")
    limit = settings.get("backoffLimit", 0)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ScenarioError(f"{settings_where}: backoffLimit must be a whole number >= 0, got {limit!r}")
    backoff = BackoffPolicy(
        base_delay=parse_duration(settings.get("backoffBase", "1m"), f"{settings_where} backoffBase") / MICROS,
        max_delay=parse_duration(settings.get("backoffMax", "30m"), f"{settings_where} backoffMax") / MICROS,
        limit=limit,
    )
    return Scenario(
        name=name,
        tree=tree,
        submissions=submissions,
        oversell_rate=oversell,
        strict_priority=strict,
        queues=queues,
        priority_classes=priority_classes,
        nodes=_nodes(settings.get("nodes"), f"{settings_where} nodes"),
        until=None if until is None else parse_duration(until, f"{settings_where} until"),
        description=description if isinstance(description, str) else "",
        start_timeout=parse_duration(settings.get("startTimeout", "5m"), f"{settings_where} startTimeout"),
        backoff=backoff,
    )


def _wrapper_entries(item: object, where: str, base: Path, reader: Reader, depth: int) -> list[_JobEntry]:
    if not isinstance(item, Mapping):
        raise ScenarioError(f"{where}: expected {{file: jobs/pi.yaml, at: 0s, runFor: 60s}} or {{manifest: ...}}")
    unknown = sorted(set(item) - _JOB_FIELDS)
    if unknown:
        raise ScenarioError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_JOB_FIELDS))}")
    if ("file" in item) == ("manifest" in item):
        raise ScenarioError(f"{where}: give exactly one of file (a YAML path) and manifest (an inline object)")
    overrides = {key: item[key] for key in ("at", "runFor", "count", "every", "neverStarts") if key in item}
    if "manifest" in item:
        manifest = item["manifest"]
        if not isinstance(manifest, Mapping):
            raise ScenarioError(f"{where}: manifest must be a Kubernetes object")
        manifests = [_Doc(manifest, f"{where} manifest", base)]
    else:
        path = item["file"]
        if not isinstance(path, str):
            raise ScenarioError(f"{where}: file must be a path, got {path!r}")
        manifests = reader(base / path, depth + 1)
    out = []
    for doc in manifests:
        try:
            group, kind = _kind(doc.body)
        except ValueError as error:
            raise ScenarioError(f"{doc.where}: {error}") from None
        if adapter_for(group, kind) is None:
            raise ScenarioError(f"{doc.where}: kind {kind!r} ({group or 'core'}) is not a supported job kind")
        out.append(_entry_from_manifest(doc.body, doc.where, overrides))
    return out


def _queues(
    tree: QuotaTree, settings: Obj, where: str, docs: Iterable[_Doc]
) -> dict[str, Obj]:
    default = _policy(settings.get("queuePolicy"), f"{where} queuePolicy")
    per_leaf_raw = settings.get("queuePolicies") or {}
    if not isinstance(per_leaf_raw, Mapping):
        raise ScenarioError(f"{where}: queuePolicies must map leaf names to Round or Block")
    per_leaf: dict[str, Policy] = {}
    for leaf_name, value in per_leaf_raw.items():
        key = str(leaf_name).lower()
        if key not in tree.nodes or not tree.nodes[key].is_leaf:
            raise ScenarioError(f"{where}: queuePolicies names {leaf_name!r}, which is not a leaf of the tree")
        per_leaf[key] = _policy(value, f"{where} queuePolicies.{leaf_name}")
    queues: dict[str, Obj] = {}
    for leaf in tree.leaves():
        policy = per_leaf.get(leaf.key, default)
        for namespace in leaf.namespaces:
            name = queue_name(leaf.name, namespace)
            queues[name] = {"metadata": {"name": name}, "spec": {"queuePolicy": policy.value}}
    for doc in docs:
        metadata = doc.body.get("metadata")
        queue = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(queue, str):
            raise ScenarioError(f"{doc.where}: a Queue needs metadata.name")
        spec = doc.body.get("spec")
        _policy(spec.get("queuePolicy") if isinstance(spec, Mapping) else None, f"{doc.where} spec.queuePolicy")
        queues[queue] = doc.body
    return queues


def _without_sim_annotations(body: Obj) -> Doc:
    obj = copy.deepcopy(dict(body))
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("annotations"), dict):
        for key in (*SIM_ANNOTATIONS, *LEGACY_SIM_ANNOTATIONS):
            metadata["annotations"].pop(key, None)
        if not metadata["annotations"]:
            del metadata["annotations"]
    return obj


def _submissions(
    tree: QuotaTree, entries: Sequence[_JobEntry], priority_classes: Mapping[str, int]
) -> tuple[Submission, ...]:
    total = sum(entry.count for entry in entries)
    if total > MAX_JOBS_PER_SCENARIO:
        raise ScenarioError(f"the scenario expands to {total} jobs, more than {MAX_JOBS_PER_SCENARIO}; check count")
    sequence: dict[tuple[str, str], int] = {}
    seen: dict[tuple[str, str, str], str] = {}
    out: list[tuple[int, int, Submission]] = []
    for entry in entries:
        group, kind = _kind(entry.body)
        adapter = adapter_for(group, kind)
        assert adapter is not None  # checked when the entry was made
        template = _without_sim_annotations(entry.body)
        metadata = template.get("metadata")
        if not isinstance(metadata, dict):
            raise ScenarioError(f"{entry.where}: the job needs metadata with a namespace and a name or generateName")
        namespace = metadata.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            raise ScenarioError(f"{entry.where}: the job needs metadata.namespace (one of a leaf's namespaces)")
        leaf = tree.leaf_for_namespace(namespace)
        if leaf is None:
            raise ScenarioError(
                f"{entry.where}: namespace {namespace!r} is in no leaf of the ElasticQuotaTree, so the queue would not "
                "hold this job; add the namespace to a leaf or move the job"
            )
        fixed, prefix = metadata.get("name"), metadata.get("generateName")
        if not (isinstance(fixed, str) and fixed) and not (isinstance(prefix, str) and prefix):
            raise ScenarioError(f"{entry.where}: the job needs metadata.name or metadata.generateName")
        if isinstance(fixed, str) and fixed and entry.count > 1:
            raise ScenarioError(
                f"{entry.where}: {entry.count} copies cannot share the name {fixed!r}; use generateName instead"
            )
        for copy_index in range(entry.count):
            obj = copy.deepcopy(template) if copy_index else template
            meta = obj["metadata"]
            assert isinstance(meta, dict)  # the template's, checked above
            if isinstance(fixed, str) and fixed:
                job_name = fixed
            else:
                number = sequence.get((namespace, str(prefix)), 0) + 1
                sequence[(namespace, str(prefix))] = number
                job_name = f"{prefix}{number:05d}"
                meta.pop("generateName", None)
            meta["name"] = job_name
            source = entry.where if entry.count == 1 else f"{entry.where} (copy {copy_index + 1} of {entry.count})"
            identity = (adapter.kind, namespace, job_name)
            if identity in seen:
                raise ScenarioError(f"{source}: {adapter.kind} {namespace}/{job_name} is already submitted by "
                                    f"{seen[identity]}; give each job its own name")
            seen[identity] = source
            try:
                adapter.to_workload(obj, leaf.name, priority_classes)
            except ValueError as error:
                raise ScenarioError(f"{source}: cannot size {adapter.kind} {namespace}/{job_name}: {error}") from None
            at = entry.at + copy_index * entry.every
            submission = Submission(at=at, run_for=entry.run_for, adapter=adapter, obj=obj, leaf=leaf.key,
                                    source=source, never_starts=entry.never_starts)
            out.append((at, len(out), submission))
    out.sort(key=lambda item: (item[0], item[1]))
    return tuple(submission for _, _, submission in out)

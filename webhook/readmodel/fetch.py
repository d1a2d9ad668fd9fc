"""Reading the API for the developer commands and the console: which job kinds are served, and a
:class:`Snapshot`.

Every read degrades instead of failing where the answer can be done without it: a developer may not be
allowed to read the tree in ``kube-system`` or the jobs of other namespaces, and a cluster may not serve the
Kubeflow kinds. Only what the command cannot do without (the jobs of the user's own namespace) raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from webhook.api.names import (
    CONTROLLER_COMPONENT,
    QUEUE_NAMESPACE,
    QUOTA_LABEL,
    QUOTA_RESOURCE_ANNOTATION,
    TREE_NAMESPACE,
    UNFINISHED_PODS,
)
from webhook.api.objects import Obj, events_about, mappings, name_of
from webhook.core.dra import DeviceQuota, device_quota_of
from webhook.core.treechoice import oldest_tree_object
from webhook.readmodel.kubeapi import (
    BUDGETS,
    CLAIM_TEMPLATES,
    CLAIMS,
    DEVICE_CLASSES,
    EVENTS,
    LIMIT_RANGES,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    RUNTIME_CLASSES,
    TREES,
    ApiError,
    KubeApi,
    Ref,
)
from webhook.readmodel.pod_waits import EXTENDER_EVENTS
from webhook.readmodel.view import KindSource, Snapshot, listed_job
from webhook.workloads.registry import all_adapters
from webhook.workloads.spawned import separate_spawned


class CliError(Exception):
    """A failure the user sees as one line on stderr (exit status 1)."""


class JobNotFound(CliError):
    """No job has the name asked for (``kq why`` then looks for work the queue does not hold)."""


def served_kinds(api: KubeApi) -> list[KindSource]:
    """Every job kind with an adapter that the API serves (batch Jobs and Pods always), in a stable order."""
    groups: dict[str, list[str]] = {}
    try:
        listing = api.request("GET", "/apis")
        for group in mappings(listing.get("groups")):
            versions = [str(v.get("version")) for v in mappings(group.get("versions"))]
            groups[str(group.get("name"))] = versions
    except ApiError:
        groups = {}
    resources: dict[tuple[str, str], set[str]] = {}
    out: list[KindSource] = []
    for adapter in sorted(all_adapters(), key=lambda a: (a.kind != "Job", a.kind == "Pod", a.kind)):
        if adapter.group in ("", "batch"):
            out.append(KindSource(adapter, adapter.versions[0]))
            continue
        for version in adapter.versions:
            if version not in groups.get(adapter.group, ()):
                continue
            key = (adapter.group, version)
            if key not in resources:
                try:
                    found = api.request("GET", f"/apis/{adapter.group}/{version}")
                    resources[key] = {str(r.get("name")) for r in mappings(found.get("resources"))}
                except ApiError:
                    resources[key] = set()
            if adapter.plural in resources[key]:
                out.append(KindSource(adapter, version))
                break
    return out


def ref_of(source: KindSource) -> Ref:
    return Ref(source.adapter.group, source.version, source.adapter.plural)


def choose_tree(objects: Sequence[Obj]) -> Obj | None:
    """The honoured tree object (:mod:`webhook.core.treechoice`), as the controller chooses it."""
    return oldest_tree_object(objects, TREE_NAMESPACE)


def read_tree(api: KubeApi) -> tuple[Obj | None, str | None]:
    """The tree object, or why it could not be read (``(None, None)``: kube-queue has no tree)."""
    try:
        return choose_tree(api.list(TREES, TREE_NAMESPACE)), None
    except ApiError as error:
        if error.not_found:
            return None, None
        return None, f"cannot read the ElasticQuotaTree in {TREE_NAMESPACE}: {error.one_line()}"


def read_queues(api: KubeApi) -> dict[str, Obj]:
    try:
        return {name_of(obj): obj for obj in api.list(QUEUES, QUEUE_NAMESPACE)}
    except ApiError:
        return {}


def read_priority_classes(api: KubeApi) -> dict[str, int]:
    try:
        items = api.list(PRIORITY_CLASSES)
    except ApiError:
        return {}
    out = {}
    for obj in items:
        value = obj.get("value")
        if isinstance(value, int) and not isinstance(value, bool):
            out[name_of(obj)] = value
    return out


def controller_events(api: KubeApi, namespace: str | None) -> list[Obj]:
    """The queue controller's Events in ``namespace`` (all namespaces when ``None``); empty if unreadable."""
    try:
        return api.list(EVENTS, namespace, field_selector=f"source={CONTROLLER_COMPONENT}")
    except ApiError:
        return []


def extender_events(api: KubeApi, namespace: str | None) -> list[Obj]:
    """The extender's Events in ``namespace`` (its ``PreemptionRefused`` on pods); empty if unreadable."""
    try:
        return api.list(EVENTS, namespace, field_selector=EXTENDER_EVENTS)
    except ApiError:
        return []


def job_events(api: KubeApi, namespace: str, name: str, uid: str) -> list[Obj]:
    """Events about one object (by name and uid), oldest first; empty if unreadable."""
    try:
        return api.list(EVENTS, namespace, field_selector=events_about(name, uid))
    except ApiError:
        return []


def _managed_pods(source: KindSource, pods: Iterable[Obj]) -> list[Obj]:
    return [pod for pod in pods if listed_job(source, pod)]


def _list_jobs(api: KubeApi, sources: Sequence[KindSource], namespace: str | None) -> list[tuple[KindSource, Obj]]:
    """Jobs of every (non-Pod) kind in ``namespace``; :class:`ApiError` when one cannot be listed. In one
    namespace, a kind the user may not list is left out (an operator's kind that a developer's ``edit`` role
    does not grant), as long as some kind may be listed: the jobs they may see are still shown."""
    out: list[tuple[KindSource, Obj]] = []
    refused: ApiError | None = None
    listed = False
    for source in sources:
        if source.adapter.kind == "Pod":
            continue
        try:
            items = api.list(ref_of(source), namespace)
        except ApiError as error:
            if error.not_found:  # the kind went away since discovery
                continue
            if error.status == 403 and namespace is not None:
                refused = refused or error
                continue
            raise
        listed = True
        # A RayJob's RayCluster and submitter Job are its children, shown as the RayJob (workloads/children.py).
        out += [(source, item) for item in items if listed_job(source, item)]
    if refused is not None and not listed:
        raise refused
    return out


def _pass_pods(api: KubeApi) -> tuple[list[Obj] | None, list[Obj]]:
    """Every unfinished pod and every PodDisruptionBudget, as the controller's pass reads them (pods no job
    accounts for count and may be evicted by reclaim); ``(None, [])`` when this user may not read them all."""
    try:
        pods: list[Obj] = list(api.list(PODS, None, field_selector=UNFINISHED_PODS))
        budgets: list[Obj] = list(api.list(BUDGETS, None))
    except ApiError:
        return None, []
    return pods, budgets


def read_devices(api: KubeApi) -> DeviceQuota | None:
    """The DRA objects the controller counts devices by (:func:`webhook.core.dra.device_quota_of`): an empty
    quota when the API serves no DRA, ``None`` when this user may not read them."""
    try:
        classes = api.list(DEVICE_CLASSES, None)
    except ApiError as error:
        return DeviceQuota() if error.not_found else None
    try:
        templates, claims = api.list(CLAIM_TEMPLATES, None), api.list(CLAIMS, None)
    except ApiError:
        return None
    return device_quota_of(classes, templates, claims, QUOTA_RESOURCE_ANNOTATION)


def read_admission(api: KubeApi, namespaces: Iterable[str | None], *, every: bool) -> tuple[list[Obj], list[Obj]]:
    """The LimitRanges (of every namespace with ``every``: this user may read every job, else of ``namespaces``)
    and the RuntimeClasses (none when this user may not list them): what the API server's admission gives a
    job's pods that a job written before them lacks (:func:`webhook.workloads.limits.as_admitted`)."""
    limit_ranges: list[Obj] = []
    for namespace in [None] if every else dict.fromkeys(namespace for namespace in namespaces if namespace):
        try:
            limit_ranges += api.list(LIMIT_RANGES, namespace)
        except ApiError:
            continue
    try:
        classes = api.list(RUNTIME_CLASSES, None)
    except ApiError:
        classes = []
    return limit_ranges, classes


def load_snapshot(
    api: KubeApi,
    namespaces: Sequence[str] | None,
    *,
    now: float,
    complete: bool = False,
    with_events: bool = False,
    kinds: Sequence[KindSource] | None = None,
) -> Snapshot:
    """Objects for the jobs of ``namespaces`` (every namespace when ``None``).

    Jobs are also read in the other namespaces of the same leaf quotas (positions count every waiting job of
    a quota); with ``complete`` every job of every namespace is read when allowed (``Snapshot.complete``),
    so that the usage can be rebuilt from the admission records. Pods are read for ``namespaces`` only
    (plus the queued plain Pods of the other namespaces read).
    """
    tree_obj, tree_problem = read_tree(api)
    snapshot = Snapshot(
        now=now,
        tree_obj=tree_obj,
        tree_problem=tree_problem,
        queues=read_queues(api),
        priority_classes=read_priority_classes(api),
    )
    sources = list(kinds) if kinds is not None else served_kinds(api)
    tree = snapshot.tree
    wanted = None if namespaces is None else list(dict.fromkeys(namespaces))
    jobs: list[tuple[KindSource, Obj]] | None = None
    if wanted is None or complete:
        try:
            jobs = _list_jobs(api, sources, None)
        except ApiError as error:
            if wanted is None:
                raise CliError(f"cannot list jobs in all namespaces: {error.one_line()}") from None
            jobs = None
    snapshot.complete = jobs is not None
    extra: list[str] = []
    if jobs is None:
        assert wanted is not None
        jobs = []
        for namespace in wanted:
            try:
                jobs += _list_jobs(api, sources, namespace)
            except ApiError as error:
                raise CliError(f"cannot list jobs in namespace {namespace}: {error.one_line()}") from None
        if tree is not None:
            for namespace in wanted:
                leaf = tree.leaf_for_namespace(namespace)
                if leaf is not None:
                    extra += [ns for ns in leaf.namespaces if ns not in wanted and ns not in extra]
        for namespace in extra:
            try:
                jobs += _list_jobs(api, sources, namespace)
            except ApiError:
                continue  # another namespace of the quota that this user may not read
    targets: list[str | None] = list(wanted) if wanted is not None else [None]
    pods: list[Obj] = []
    for target in targets:
        try:
            pods += api.list(PODS, target)
        except ApiError as error:
            raise CliError(f"cannot list pods in {target or 'all namespaces'}: {error.one_line()}") from None
    snapshot.pods = pods
    pod_source = next((source for source in sources if source.adapter.kind == "Pod"), None)
    if pod_source is not None:
        tagged = list(pods)
        if wanted is not None and snapshot.complete:
            try:
                tagged = list(api.list(PODS, None, label_selector=QUOTA_LABEL))
            except ApiError:
                snapshot.complete = False
        for namespace in extra:
            try:
                tagged += api.list(PODS, namespace, label_selector=QUOTA_LABEL)
            except ApiError:
                continue
        jobs += [(pod_source, pod) for pod in _managed_pods(pod_source, tagged)]
    # The pods a job's pod created (a SparkApplication's executors) show as that job's, as the controller counts them.
    kept, spawned = separate_spawned([((source, obj), source.adapter, obj) for source, obj in jobs])
    snapshot.spawned = {key: (source.adapter.kind, name_of(obj)) for key, (source, obj) in spawned.items()}
    snapshot.jobs = [job for job, _, _ in kept]
    snapshot.limit_ranges, snapshot.runtime_classes = read_admission(api, [*targets, *extra],
                                                                     every=snapshot.complete or wanted is None)
    if complete and snapshot.complete:
        snapshot.tree_pods, snapshot.budgets = _pass_pods(api)
        devices = read_devices(api)
        if devices is None:
            snapshot.tree_pods = None  # the pass cannot be run as the controller runs it
        else:
            snapshot.devices = devices
    if with_events:
        for target in targets:
            snapshot.events += controller_events(api, target)
            snapshot.pod_events += extender_events(api, target)
    return snapshot

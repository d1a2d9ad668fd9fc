"""A namespace joins the quota tree managed, before any job of it can run unheld.

The job hooks only see namespaces labelled :data:`~webhook.api.names.MANAGED_NAMESPACE_LABEL` (so namespaces
outside the tree never depend on the webhook). The controller labels the tree's namespaces, but only after it
has seen the tree: a job created in between would run without queueing (issue 34: 2 of 10 jobs created
0.24-0.64 s after the tree gained their namespace did). So the label comes first:

* **a tree that lists an existing namespace**: the validating hook labels the namespace before it allows the
  tree (:func:`namespaces_joining`; the configuration declares ``sideEffects: NoneOnDryRun`` and a dry run
  labels nothing). A namespace this replica's watch has not delivered yet is patched too (one created a moment
  ago); one that does not exist is skipped. If the label cannot be written, the tree is refused ("retry").
  Should the tree then not be stored after all, the controller takes the label off again once it is a minute
  old (``webhook.controller.decide.JOIN_GRACE_SECONDS``: its own tree watch may be behind the label). The
  answer also waits, at most :data:`LABEL_SEEN_SECONDS`, until this replica's namespace watch shows the label:
  the API server picks the hooks of a job by its own namespace watch, fed from the same cache, so a job
  created right after the tree is stored is routed to the hooks;
* **a namespace created while the tree lists it**: the namespace hook labels it at creation
  (:func:`namespace_operations`). When the tree this replica knows does not list it, the tree is read as
  stored before the answer (:func:`namespace_unlisted`): it may have gained the namespace a moment ago;
* **a job of a labelled namespace the webhook's tree does not list yet** (its watch is a moment behind): the
  job is held all the same, untagged (``AdmissionState.held_untagged``), and queues once the tree arrives.
  The namespace watch can be behind as well, so the hooks that select labelled namespaces are called on a
  ``/managed`` path, and the handlers take the label as known there (``AdmissionState.labelled``).

Each label comes with :data:`~webhook.api.names.MANAGED_SINCE_ANNOTATION`, when the namespace joined.

The same effect routes a namespace's workload pods to the webhook that applies its ResourcePolicies: a policy
is allowed only once its namespace carries :data:`~webhook.api.names.PLACEMENT_NAMESPACE_LABEL`
(:func:`namespaces_routed`). Inside the tree the pods of workload controllers reach the webhook only there (the
admission policy marks and tags the others itself, without the round trip), so a Deployment created right after
its policy gets the policy's toleration and profile.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from webhook.admission.review import AdmissionRequest
from webhook.admission.state import AdmissionState, Settings
from webhook.api.kinds import ELASTIC_QUOTA_TREE, NAMESPACE, RESOURCE_POLICY
from webhook.api.names import (
    MANAGED_NAMESPACE_LABEL,
    NAMESPACE_QUOTA_LABEL,
    PLACEMENT_NAMESPACE_LABEL,
)
from webhook.api.namespace_labels import label_patch
from webhook.api.objects import Obj, mapping, meta
from webhook.core.quota import QuotaTree, QuotaTreeError, namespace_quota_label, parse_tree
from webhook.workloads.base import JSONPatch, pointer

log = logging.getLogger(__name__)

Labeller = Callable[[Sequence[str], "Labelling"], Awaitable[None]]
"""Labels namespaces as a :class:`Labelling` says (raises :class:`JoinError` naming the one it could not label)."""

LABEL_SEEN_SECONDS = 2.0
"""How long an answer that labelled namespaces waits for this replica's watch to show the labels."""
LABEL_SEEN_POLL_SECONDS = 0.01


class JoinError(RuntimeError):
    """A namespace that could not be labelled: the object that needs the label is refused."""


@dataclass(frozen=True, slots=True)
class Labelling:
    """What a namespace must carry before an allowed object is stored, and why (for the refusal)."""

    patch: Obj
    """The namespace's merge patch."""
    label: str
    """The label it sets (``true``), named in the refusal."""
    why: str
    """What the label does, ending the refusal's sentence."""


def joining(now: float) -> Labelling:
    """A namespace joins the tree at ``now``: managed, so no job of it runs unqueued."""
    return Labelling(label_patch(MANAGED_NAMESPACE_LABEL, "true", now), MANAGED_NAMESPACE_LABEL,
                     "which keeps its jobs from running unqueued")


def routed(now: float) -> Labelling:
    """A namespace holds a ResourcePolicy since ``now``: its pods go to the webhook that applies it."""
    return Labelling(label_patch(PLACEMENT_NAMESPACE_LABEL, "true", now), PLACEMENT_NAMESPACE_LABEL,
                     "which sends its pods to the webhook that applies the policy")


def namespaces_joining(request: AdmissionRequest, state: AdmissionState, settings: Settings) -> tuple[str, ...]:
    """The namespaces an allowed ``request`` makes join the honoured tree that are not known to carry the managed
    label: a create or update of an ElasticQuotaTree in the tree namespace, not a dry run. Sorted. Those this
    replica's watch does not know are included: they may exist already (the labeller skips the others)."""
    if (request.kind.group, request.kind.kind) != (ELASTIC_QUOTA_TREE.group, ELASTIC_QUOTA_TREE.kind):
        return ()
    if request.operation not in ("CREATE", "UPDATE") or request.dry_run or request.obj is None:
        return ()
    if request.namespace != settings.tree_namespace:
        return ()
    spec = request.obj.get("spec")
    try:
        tree = parse_tree(spec if isinstance(spec, Mapping) else {})
    except QuotaTreeError:
        return ()
    labels = state.namespace_labels
    return tuple(sorted(
        namespace for namespace in tree.leaf_by_namespace
        if labels.get(namespace, {}).get(MANAGED_NAMESPACE_LABEL) != "true"
    ))


def namespaces_routed(request: AdmissionRequest, state: AdmissionState) -> tuple[str, ...]:
    """The namespace of a ResourcePolicy an allowed ``request`` creates or changes (not a dry run) when the
    namespace does not carry :data:`~webhook.api.names.PLACEMENT_NAMESPACE_LABEL` yet (as far as this replica's
    watch knows; the label costs one patch when it is there already). The controller keeps the label while the
    namespace holds a valid policy (every policy the webhook allows is valid) and removes it after."""
    if (request.kind.group, request.kind.kind) != (RESOURCE_POLICY.group, RESOURCE_POLICY.kind):
        return ()
    if request.operation not in ("CREATE", "UPDATE") or request.dry_run or not request.namespace:
        return ()
    if state.namespace_labels.get(request.namespace, {}).get(PLACEMENT_NAMESPACE_LABEL) == "true":
        return ()
    return (request.namespace,)


def namespace_unlisted(request: AdmissionRequest, state: AdmissionState) -> str | None:
    """The name of a Namespace ``request`` creates (not a dry run) that the tree this replica knows does not
    list: its answer is given again from the tree as stored, which may list it already. ``None`` otherwise."""
    if (request.kind.group, request.kind.kind) != ("", NAMESPACE.kind):
        return None
    if request.operation != "CREATE" or request.dry_run or request.obj is None:
        return None
    name = request.name or str(meta(request.obj).get("name") or "")
    if not name or (state.tree is not None and namespace_quota_label(state.tree, name) is not None):
        return None
    return name


def namespace_operations(request: AdmissionRequest, state: AdmissionState, now: float) -> list[JSONPatch]:
    """The JSON patch of a Namespace created while the honoured tree lists it: what
    :func:`~webhook.api.namespace_labels.label_patch` sets for the managed label, and its leaf's name
    (:func:`~webhook.core.quota.namespace_quota_label`). Nothing for any other namespace."""
    if request.operation != "CREATE" or request.obj is None or state.tree is None:
        return []
    metadata = meta(request.obj)
    name = request.name or str(metadata.get("name") or "")
    leaf = namespace_quota_label(state.tree, name)
    if leaf is None:
        return []
    ops: list[JSONPatch] = []
    wanted = mapping(label_patch(MANAGED_NAMESPACE_LABEL, "true", now).get("metadata"))
    labels = {**mapping(wanted.get("labels")), NAMESPACE_QUOTA_LABEL: leaf}
    for field, values in {**wanted, "labels": labels}.items():
        if not isinstance(metadata.get(field), Mapping):
            ops.append({"op": "add", "path": pointer("metadata", field), "value": values})
            continue
        for key, value in mapping(values).items():
            ops.append({"op": "add", "path": pointer("metadata", field, key), "value": value})
    return ops


Patcher = Callable[[str, Obj], Awaitable[bool]]
"""Merge-patches one namespace: ``False`` when no such namespace exists."""
Seen = Callable[[str, str], bool]
"""Whether this replica's namespace watch shows namespace ``[0]`` with label ``[1]`` set to ``true``."""
TreeReader = Callable[[], Awaitable[QuotaTree | None]]
"""Reads the honoured tree as stored (``None``: there is none)."""


def labeller_on(loop: asyncio.AbstractEventLoop, patch: Patcher, seen: Seen | None = None,
                wait_seconds: float = LABEL_SEEN_SECONDS) -> Labeller:
    """A :data:`Labeller` for the admission thread that patches each namespace with ``patch`` on ``loop`` (the
    main loop, where the API client lives), then waits at most ``wait_seconds`` until ``seen`` shows every
    label it wrote."""

    async def run(namespaces: Sequence[str], labelling: Labelling) -> None:
        written: list[str] = []
        for namespace in namespaces:
            future: concurrent.futures.Future[bool] = asyncio.run_coroutine_threadsafe(
                _labelled(patch, namespace, labelling), loop
            )
            if await asyncio.wrap_future(future):
                written.append(namespace)
        if seen is None:
            return
        deadline = time.monotonic() + wait_seconds
        while not all(seen(namespace, labelling.label) for namespace in written):
            if time.monotonic() >= deadline:
                log.warning("component=admission event=label_not_seen namespaces=%s label=%s seconds=%.1f",
                            ",".join(written), labelling.label, wait_seconds)
                return
            await asyncio.sleep(LABEL_SEEN_POLL_SECONDS)

    return run


def tree_reader_on(loop: asyncio.AbstractEventLoop, read: TreeReader) -> TreeReader:
    """A :data:`TreeReader` for the admission thread that reads with ``read`` on ``loop``."""

    async def on_loop() -> QuotaTree | None:
        return await read()

    async def run() -> QuotaTree | None:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(on_loop(), loop))

    return run


async def _labelled(patch: Patcher, namespace: str, labelling: Labelling) -> bool:
    try:
        return await patch(namespace, labelling.patch)
    except Exception as error:
        raise JoinError(f"namespace {namespace} could not be labelled {labelling.label}=true, {labelling.why} "
                        f"({error}); retry") from error

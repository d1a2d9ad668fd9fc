"""A namespace joins the quota tree managed, before any job of it can run unheld.

The job hooks only see namespaces labelled :data:`~webhook.api.names.MANAGED_NAMESPACE_LABEL` (so namespaces
outside the tree never depend on the webhook). The controller labels the tree's namespaces, but only after it
has seen the tree: a job created in between would run without queueing (issue 34: 2 of 10 jobs created
0.24-0.64 s after the tree gained their namespace did). So the label comes first:

* **a tree that lists an existing namespace**: the validating hook labels the namespace before it allows the
  tree (:func:`namespaces_joining`; the configuration declares ``sideEffects: NoneOnDryRun`` and a dry run
  labels nothing). If the label cannot be written, the tree is refused ("retry"). Should the tree then not be
  stored after all, the controller takes the label off again at its next pass (the tree does not list it);
* **a namespace created while the tree lists it**: the namespace hook labels it at creation
  (:func:`namespace_operations`);
* **a job of a labelled namespace the webhook's tree does not list yet** (its watch is a moment behind): the
  job is held all the same, untagged (``AdmissionState.held_untagged``), and queues once the tree arrives.
  The namespace watch can be behind as well, so the hooks that select labelled namespaces are called on a
  ``/managed`` path, and the handlers take the label as known there (``AdmissionState.labelled``).

Each label comes with :data:`~webhook.api.names.MANAGED_SINCE_ANNOTATION`, when the namespace joined.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from webhook.admission.review import AdmissionRequest
from webhook.admission.state import AdmissionState, Settings
from webhook.api.kinds import ELASTIC_QUOTA_TREE
from webhook.api.names import MANAGED_NAMESPACE_LABEL, MANAGED_SINCE_ANNOTATION, NAMESPACE_QUOTA_LABEL
from webhook.core.quota import QuotaTreeError, namespace_quota_label, parse_tree
from webhook.workloads.base import rfc3339

Labeller = Callable[[Sequence[str]], Awaitable[None]]
"""Labels namespaces managed (raises :class:`JoinError` naming the one it could not label)."""


class JoinError(RuntimeError):
    """A namespace that could not be labelled managed: the tree that lists it is refused."""


def managed_patch(now: float) -> dict[str, Any]:
    """The merge patch that makes a namespace managed, joined at ``now`` (seconds since the epoch)."""
    return {"metadata": {"labels": {MANAGED_NAMESPACE_LABEL: "true"},
                         "annotations": {MANAGED_SINCE_ANNOTATION: rfc3339(now)}}}


def namespaces_joining(request: AdmissionRequest, state: AdmissionState, settings: Settings) -> tuple[str, ...]:
    """The existing namespaces an allowed ``request`` makes join the honoured tree without the managed label:
    a create or update of an ElasticQuotaTree in the tree namespace, not a dry run. Sorted."""
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
        if namespace in labels and labels[namespace].get(MANAGED_NAMESPACE_LABEL) != "true"
    ))


def namespace_operations(request: AdmissionRequest, state: AdmissionState, now: float) -> list[dict[str, Any]]:
    """The JSON patch of a Namespace created while the honoured tree lists it: the managed label, its leaf's
    name (:func:`~webhook.core.quota.namespace_quota_label`) and when it joined. Nothing for any other
    namespace."""
    if request.operation != "CREATE" or request.obj is None or state.tree is None:
        return []
    name = request.name or str((request.obj.get("metadata") or {}).get("name") or "")
    leaf = namespace_quota_label(state.tree, name)
    if leaf is None:
        return []
    metadata = request.obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    ops: list[dict[str, Any]] = []
    wanted = {"labels": {MANAGED_NAMESPACE_LABEL: "true", NAMESPACE_QUOTA_LABEL: leaf},
              "annotations": {MANAGED_SINCE_ANNOTATION: rfc3339(now)}}
    for field, values in wanted.items():
        if not isinstance(metadata.get(field), Mapping):
            ops.append({"op": "add", "path": f"/metadata/{field}", "value": values})
            continue
        for key, value in values.items():
            ops.append({"op": "add", "path": f"/metadata/{field}/{key.replace('~', '~0').replace('/', '~1')}",
                        "value": value})
    return ops


def labeller_on(loop: asyncio.AbstractEventLoop, label: Callable[[str], Awaitable[None]]) -> Labeller:
    """A :data:`Labeller` for the admission thread that labels each namespace with ``label`` on ``loop`` (the
    main loop, where the API client lives)."""

    async def run(namespaces: Sequence[str]) -> None:
        for namespace in namespaces:
            future: concurrent.futures.Future[None] = asyncio.run_coroutine_threadsafe(
                _labelled(label, namespace), loop
            )
            await asyncio.wrap_future(future)

    return run


async def _labelled(label: Callable[[str], Awaitable[None]], namespace: str) -> None:
    try:
        await label(namespace)
    except Exception as error:
        raise JoinError(f"namespace {namespace} could not be labelled {MANAGED_NAMESPACE_LABEL}=true, which keeps "
                        f"its jobs from running unqueued ({error}); retry") from error

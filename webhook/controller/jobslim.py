"""How the controller keeps the objects of a job kind in memory: packed, or as a stub when its adapter does not
manage them (docs/architecture.md, "What a queued job costs in memory")."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from webhook.api.names import PARENT_ANNOTATION
from webhook.api.objects import Obj
from webhook.kube.packed import Codec, packed
from webhook.workloads.base import Adapter

STUB_METADATA = ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences")
"""What a job kind's cache keeps of an object its adapter does not manage."""


def job_slim(adapter: Adapter) -> Callable[[Obj], Obj]:
    """How a job kind's cache keeps an object: packed (:func:`~webhook.kube.packed.packed`: no managed fields,
    no ``kubectl apply`` copy, the identity as dicts, the rest compressed with one dictionary per kind), and
    only the identity of an object its adapter does not manage (:func:`stub_unmanaged`)."""
    codec = Codec()
    if type(adapter).manages is Adapter.manages:
        return lambda obj: packed(obj, codec)
    return stub_unmanaged(adapter, codec)


def stub_unmanaged(adapter: Adapter, codec: Codec) -> Callable[[Obj], Obj]:
    """A job kind's cache keeps only the identity of an object its adapter does not manage, and the others
    packed by ``codec``. A Job's pods come to the plain Pods' cache because the webhook tags them too: a pod
    is about 22 KB in memory (its managed fields with it), for every pod of the tree's namespaces, and the
    queue reads none of it. The adapter decides on
    the whole object of every event, so a stub is never what decides; it stays unmanaged (no gate, no
    admission record)."""

    def slim(obj: Obj) -> Obj:
        if adapter.manages(obj):
            return packed(obj, codec)
        metadata = obj.get("metadata")
        kept = {key: metadata[key] for key in STUB_METADATA if key in metadata} if isinstance(metadata, Mapping) else {}
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        if isinstance(annotations, Mapping) and PARENT_ANNOTATION in annotations:  # what keeps a child unmanaged
            kept["annotations"] = {PARENT_ANNOTATION: annotations[PARENT_ANNOTATION]}
        return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept}

    return slim

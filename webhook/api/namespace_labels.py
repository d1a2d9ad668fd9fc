"""The labels kube-queue keeps on namespaces, each written with the annotation that says since when.

The webhook sets the managed and placement labels before it allows the object that needs them
(``webhook.admission.joining``); the controller keeps them after (``webhook.controller.decide``). Both write
them with :func:`label_patch`, so the two can never disagree on the shape.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.api.names import (
    MANAGED_NAMESPACE_LABEL,
    MANAGED_SINCE_ANNOTATION,
    PLACEMENT_NAMESPACE_LABEL,
    PLACEMENT_SINCE_ANNOTATION,
)
from webhook.api.objects import rfc3339

SINCE_ANNOTATIONS: Mapping[str, str] = {MANAGED_NAMESPACE_LABEL: MANAGED_SINCE_ANNOTATION,
                                        PLACEMENT_NAMESPACE_LABEL: PLACEMENT_SINCE_ANNOTATION}
"""The annotation written with a label: when it was set."""


LabelPatch = dict[str, dict[str, dict[str, str | None]]]
"""``{"metadata": {"labels": {...}, "annotations": {...}}}``: a namespace's merge patch (``None`` removes)."""


def label_patch(label: str, value: str | None, now: float) -> LabelPatch:
    """The merge patch that sets a namespace's ``label`` to ``value`` (``None`` removes it) at ``now`` (seconds
    since the epoch): a label with a since annotation gets it set to ``now``, or removed with the label."""
    metadata: dict[str, dict[str, str | None]] = {"labels": {label: value}}
    since = SINCE_ANNOTATIONS.get(label)
    if since is not None:
        metadata["annotations"] = {since: rfc3339(now) if value is not None else None}
    return {"metadata": metadata}

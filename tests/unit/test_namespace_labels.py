"""The namespace labels' merge patches: one shape for the webhook and the controller
(webhook/api/namespace_labels.py)."""

from __future__ import annotations

from webhook.api.names import (
    MANAGED_NAMESPACE_LABEL,
    MANAGED_SINCE_ANNOTATION,
    NAMESPACE_QUOTA_LABEL,
    PLACEMENT_NAMESPACE_LABEL,
    PLACEMENT_SINCE_ANNOTATION,
)
from webhook.api.namespace_labels import label_patch
from webhook.api.objects import parse_time


def test_a_label_with_a_since_annotation_is_stamped_when_set_and_cleared_with_it() -> None:
    now = parse_time("2026-12-05T09:00:00Z")
    assert now is not None
    assert label_patch(MANAGED_NAMESPACE_LABEL, "true", now) == {"metadata": {
        "labels": {MANAGED_NAMESPACE_LABEL: "true"},
        "annotations": {MANAGED_SINCE_ANNOTATION: "2026-12-05T09:00:00.000000Z"}}}
    assert label_patch(PLACEMENT_NAMESPACE_LABEL, None, now) == {"metadata": {
        "labels": {PLACEMENT_NAMESPACE_LABEL: None}, "annotations": {PLACEMENT_SINCE_ANNOTATION: None}}}
    # The quota label names a leaf and has no since annotation.
    assert label_patch(NAMESPACE_QUOTA_LABEL, "Department-a", now) == {"metadata": {
        "labels": {NAMESPACE_QUOTA_LABEL: "Department-a"}}}

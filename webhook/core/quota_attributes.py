"""The quota attributes kube-queue reads from the ElasticQuotaTree (``attributes`` of a node) and what they
may hold; :func:`webhook.core.quota.validate_tree` refuses a tree with a value it could not honour (rule id
``attribute``). Unknown attributes are the operator's own and are left alone.

* :data:`~webhook.api.names.FAIR_SHARING_ATTRIBUTE`: ``"true"`` or ``"false"``, on a node with children;
* :data:`~webhook.api.names.WEIGHT_ATTRIBUTE`: a positive number (``2``, ``0.5``, ``3/2``);
* :data:`~webhook.api.names.RECLAIM_AFTER_ATTRIBUTE`: a duration (``10m``, ``1h30m``; Go's grammar), above zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from webhook.api.names import FAIR_SHARING_ATTRIBUTE, RECLAIM_AFTER_ATTRIBUTE, WEIGHT_ATTRIBUTE
from webhook.core.duration import DurationError, parse_duration

__all__ = ["attribute_problems", "parse_weight", "reclaim_after"]


def parse_weight(text: str) -> Fraction | None:
    """A weight attribute's value: a positive number (``2``, ``0.5``, ``3/2``); ``None`` when it is not one."""
    try:
        value = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


def reclaim_after(attributes: Mapping[str, str]) -> Fraction | None:
    """The minimum run time before reclaim, in seconds (``None``: none, or not a duration above zero)."""
    text = attributes.get(RECLAIM_AFTER_ATTRIBUTE)
    if text is None:
        return None
    try:
        seconds = parse_duration(text.strip())
    except DurationError:
        return None
    return seconds if seconds > 0 else None


def attribute_problems(attributes: Mapping[str, str], has_children: bool) -> list[str]:
    """What is wrong with the kube-queue attributes of one node, each saying what to write instead."""
    out: list[str] = []
    fair = attributes.get(FAIR_SHARING_ATTRIBUTE)
    if fair is not None:
        if fair.lower() not in ("true", "false"):
            out.append(f"attribute {FAIR_SHARING_ATTRIBUTE}: {fair!r} is not \"true\" or \"false\"")
        elif fair.lower() == "true" and not has_children:
            out.append(f"attribute {FAIR_SHARING_ATTRIBUTE}: a leaf has no children to share among; set it on "
                       "their parent")
    weight = attributes.get(WEIGHT_ATTRIBUTE)
    if weight is not None and parse_weight(weight) is None:
        out.append(f"attribute {WEIGHT_ATTRIBUTE}: {weight!r} is not a positive number (write \"2\", \"0.5\" or "
                   "\"3/2\")")
    after = attributes.get(RECLAIM_AFTER_ATTRIBUTE)
    if after is not None and reclaim_after(attributes) is None:
        out.append(f"attribute {RECLAIM_AFTER_ATTRIBUTE}: {after!r} is not a duration above zero (write \"10m\" or "
                   "\"1h30m\")")
    return out

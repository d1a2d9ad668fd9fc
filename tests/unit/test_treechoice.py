"""Which ElasticQuotaTree is honoured: one rule for every part (webhook/core/treechoice.py)."""

from __future__ import annotations

from typing import Any

from tests.builders import SEED_TREE_SPEC
from webhook.core.treechoice import honoured_again, honoured_in, honoured_tree, oldest_tree_object


def tree_object(name: str, created: str | None, namespace: str = "kube-system", spec: Any = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if created is not None:
        metadata["creationTimestamp"] = created
    return {"metadata": metadata, "spec": SEED_TREE_SPEC if spec is None else spec}


def test_the_oldest_in_the_tree_namespace_then_the_smallest_name() -> None:
    newer = tree_object("a", "2024-04-08T02:00:01Z")
    older = tree_object("z", "2024-04-08T02:00:00Z")
    twin = tree_object("y", "2024-04-08T02:00:00Z")
    unstamped = tree_object("0", None)
    outside = tree_object("x", "2020-01-01T00:00:00Z", namespace="default")
    assert oldest_tree_object([newer, older, twin, unstamped, outside]) is twin
    assert oldest_tree_object([unstamped, newer]) is newer
    assert oldest_tree_object([outside]) is None
    assert oldest_tree_object([]) is None


def test_the_honoured_tree_is_parsed_or_says_why_not() -> None:
    chosen = honoured_tree([tree_object("t", "2024-04-08T02:00:00Z")])
    assert chosen.tree is not None and chosen.problem is None
    bad_spec = {"root": {"name": "root", "min": {"cpu": "x"}}}
    broken = honoured_tree([tree_object("t", "2024-04-08T02:00:00Z", spec=bad_spec)])
    assert broken.obj is not None and broken.tree is None
    assert broken.problem is not None and broken.problem.startswith("ElasticQuotaTree kube-system/t is invalid: ")
    assert honoured_tree([]) == type(chosen)(None, None, None)


def test_a_status_write_keeps_the_parsed_tree_a_new_spec_or_object_parses_again() -> None:
    """What the webhook and the controller of one process share (webhook/kube/shared.py): a status write of the
    honoured tree, the controller's own every pass, leaves them the same parsed tree."""
    first = honoured_again([tree_object("t", "2024-04-08T02:00:00Z")], "kube-system", None)
    assert first.tree is not None
    written = {**tree_object("t", "2024-04-08T02:00:00Z"), "status": {"root": {"name": "root"}}}
    kept = honoured_again([written], "kube-system", first)
    assert kept.tree is first.tree and kept.obj is written
    room = {"cpu": "1000", "memory": "1000Gi", "nvidia.com/gpu": 4}
    grown = {**SEED_TREE_SPEC, "root": {**SEED_TREE_SPEC["root"], "max": room, "min": room}}
    resized = honoured_again([tree_object("t", "2024-04-08T02:00:00Z", spec=grown)], "kube-system", kept)
    assert resized.tree is not None and resized.tree is not first.tree and resized.tree != first.tree
    other = honoured_again([tree_object("u", "2024-04-08T02:00:00Z")], "kube-system", kept)
    assert other.tree is not first.tree and other.tree == first.tree
    bad_spec = {"root": {"name": "root", "min": {"cpu": "x"}}}
    broken = honoured_again([tree_object("t", "2024-04-08T02:00:00Z", spec=bad_spec)], "kube-system", kept)
    assert broken.tree is None and broken.problem is not None
    assert honoured_again([], "kube-system", kept) == type(first)(None, None, None)
    assert honoured_in("kube-system")([written], first).tree is first.tree

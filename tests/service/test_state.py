"""The state store: each cache rebuilds its part; invalid objects are left out, never fatal."""

from __future__ import annotations

import copy

from tests.builders import SEED_TREE_SPEC
from webhook.admission.state import AdmissionState, StateStore


def tree(
    name: str = "elasticquotatree",
    namespace: str = "kube-system",
    created: str = "2024-01-01T00:00:00Z",
    spec: object = None,
) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": copy.deepcopy(SEED_TREE_SPEC) if spec is None else spec,
    }


def test_the_tree_in_kube_system_manages_its_namespaces() -> None:
    store = StateStore()
    store.set_trees([tree()])
    leaf = store.current.leaf_for_namespace("user-c")
    assert leaf is not None and leaf.full_name == "root/Department-b"
    assert store.current.leaf_for_namespace("default") is None
    assert store.current.other_trees("kube-system", "elasticquotatree") == 0
    assert store.current.other_trees("kube-system", "second") == 1


def test_an_invalid_stored_tree_manages_nothing_and_says_why() -> None:
    store = StateStore()
    store.set_trees([tree(spec={"root": {"name": "root", "min": {"cpu": 1}, "max": {"cpu": 2}}})])
    assert store.current.tree is None
    assert store.current.tree_problem is not None and "root-min-eq-max" in store.current.tree_problem
    assert store.current.tree_names == frozenset({("kube-system", "elasticquotatree")})


def test_with_two_stored_trees_the_oldest_is_honoured() -> None:
    store = StateStore()
    newer = copy.deepcopy(SEED_TREE_SPEC)
    newer["root"]["children"][0]["namespaces"] = ["team-x"]
    store.set_trees([tree("b", created="2024-02-01T00:00:00Z", spec=newer), tree("a")])
    assert store.current.leaf_for_namespace("user-a") is not None
    assert store.current.leaf_for_namespace("team-x") is None


def test_policies_priority_classes_and_namespaces() -> None:
    store = StateStore()
    good = {
        "metadata": {"name": "rp", "namespace": "user-a"},
        "spec": {"units": [{"resource": "ecs"}, {"resource": "eci"}]},
    }
    bad = {"metadata": {"name": "broken", "namespace": "user-a"}, "spec": {"units": [{"resource": "tpu"}]}}
    store.set_policies([good, bad])
    assert [p.name for p in store.current.policies_in("user-a")] == ["rp"]
    assert store.current.policies_in("user-b") == ()
    store.set_priority_classes(
        [{"metadata": {"name": "high"}, "value": 1000}, {"metadata": {"name": "odd"}, "value": "x"}]
    )
    assert dict(store.current.priority_classes) == {"high": 1000}
    store.set_namespaces([{"metadata": {"name": "user-a", "labels": {"team": "a"}}}])
    assert dict(store.current.namespace_labels["user-a"]) == {"team": "a"}


def test_state_is_immutable_data() -> None:
    state = AdmissionState(priority_classes={"a": 1})
    try:
        state.priority_classes["b"] = 2  # type: ignore[index]
    except TypeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("priority_classes must be read-only")


def test_tree_namespaces_without_the_managed_label_are_reported() -> None:
    store = StateStore()
    store.set_trees([tree()])
    store.set_namespaces(
        [
            {"metadata": {"name": "user-a", "labels": {"kube-queue.x-k8s.io/managed": "true"}}},
            {"metadata": {"name": "user-b"}},
            {"metadata": {"name": "default"}},
        ]
    )
    assert store.current.unlabelled_namespaces() == ("user-b",)

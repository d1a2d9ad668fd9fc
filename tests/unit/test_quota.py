"""The ElasticQuotaTree: every rule of docs/quota-tree.md, parsing a spec, whole-object checks and queue names."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import SEED_TREE_SPEC, node, res, seed_root, seed_tree, tree
from tests.strategies import examples
from webhook.core.quota import (
    MAX_DEPTH,
    QuotaNode,
    QuotaTreeError,
    Violation,
    build_tree,
    parse_tree,
    queue_name,
    quota_fullname,
    spec_violations,
    validate_tree,
    validate_tree_object,
)

TOTAL = res(cpu=100, memory="100Gi", gpu=4)


def rules(violations: list[Violation]) -> list[tuple[str, str]]:
    return [(v.path, v.rule) for v in violations]


def two_level(*children: QuotaNode, total: Any = TOTAL) -> QuotaNode:
    return node("root", min=total, max=total, children=children)


# The seed and the builders ----------------------------------------------------------------------------------


def test_the_seed_tree_is_valid_and_indexed() -> None:
    t = seed_tree()
    assert validate_tree(t.root) == []
    assert [n.full_name for n in t.nodes.values()] == ["root", "root/Department-a", "root/Department-b"]
    assert t.node("DEPARTMENT-A").min == res(cpu=60, memory="60Gi", gpu=3)
    assert t.leaf_for_namespace("user-b") == t.node("department-a")
    assert t.leaf_for_namespace("user-c") == t.node("department-b")
    assert t.leaf_for_namespace("kube-system") is None
    assert [n.name for n in t.chain("department-b")] == ["Department-b", "root"]
    assert [n.name for n in t.leaves()] == ["Department-a", "Department-b"]
    assert t.parents["department-a"] == "root"
    assert t.parents["root"] is None
    with pytest.raises(KeyError, match="'nope'"):
        t.node("nope")


def test_parse_tree_of_the_seed_spec_equals_the_builder_tree() -> None:
    assert parse_tree(SEED_TREE_SPEC) == seed_tree()


def test_builder_nests_paths_at_every_depth() -> None:
    root = node("root", min=res(cpu=10), max=res(cpu=10), children=(
        node("dept", max=res(cpu=10), children=(node("team", namespaces=("ns",)),)),
    ))
    team = root.children[0].children[0]
    assert team.path == ("root", "dept", "team")
    assert team.full_name == "root/dept/team"
    assert tree(root).node("team").full_name == "root/dept/team"


# Every rule -------------------------------------------------------------------------------------------------

RULE_CASES: list[tuple[str, QuotaNode, list[tuple[str, str]]]] = [
    ("leaf min above max",
     two_level(node("a", min=res(cpu=10), max=res(cpu=5))),
     [("root/a", "min-le-max")]),
    ("min above max in one of several resources",
     two_level(node("a", min=res(cpu=1, memory="2Gi"), max=res(cpu=5, memory="1Gi"))),
     [("root/a", "min-le-max")]),
    ("min of a resource the max does not cap is fine",
     two_level(node("a", min=res(cpu=10), max=res(memory="1Gi"))),
     []),
    ("root min below max",
     node("root", min=res(cpu=50), max=res(cpu=100)),
     [("root", "root-min-eq-max")]),
    ("root min above max",
     node("root", min=res(cpu=100), max=res(cpu=50)),
     [("root", "min-le-max"), ("root", "root-min-eq-max")]),
    ("root max lacks a resource of its min",
     node("root", min=res(cpu=1, gpu=1), max=res(cpu=1)),
     [("root", "root-min-eq-max")]),
    ("root min lacks a resource of its max",
     node("root", min=res(cpu=1), max=res(cpu=1, gpu=1)),
     [("root", "root-min-eq-max")]),
    ("explicit zeros do not make root min and max differ",
     node("root", min=res(cpu=1, gpu=0), max=res(cpu=1)),
     []),
    ("children's min add up beyond the parent's",
     two_level(node("a", min=res(cpu=60), max=TOTAL), node("b", min=res(cpu=50), max=TOTAL)),
     [("root", "children-min-le-parent-min")]),
    ("children's min exactly the parent's",
     two_level(node("a", min=res(cpu=60), max=TOTAL), node("b", min=res(cpu=40), max=TOTAL)),
     []),
    ("children guarantee a resource the parent does not",
     two_level(node("a", min=res(**{"example.com/fpga": 1}))),
     [("root", "children-min-le-parent-min")]),
    ("a child's max above its parent's",
     two_level(node("a", max=res(cpu=101))),
     [("root/a", "child-max-le-parent-max")]),
    ("children's max may add up beyond the root's (the seed's own example)",
     two_level(node("a", max=TOTAL), node("b", max=TOTAL)),
     []),
    ("a resource the parent does not cap is not capped for the child",
     node("root", min=res(cpu=10), max=res(cpu=10), children=(node("a", max=res(cpu=5, gpu=100)),)),
     []),
    ("a grandchild above its parent but not the root",
     two_level(node("a", max=res(cpu=50), children=(node("a1", max=res(cpu=60)),))),
     [("root/a/a1", "child-max-le-parent-max")]),
    ("namespaces on a node with children",
     two_level(node("a", namespaces=("user-a",), children=(node("a1"),))),
     [("root/a", "namespaces-only-on-leaves")]),
    ("namespaces on a root with children",
     node("root", min=TOTAL, max=TOTAL, namespaces=("user-a",), children=(node("a"),)),
     [("root", "namespaces-only-on-leaves")]),
    ("namespaces on a root that is a leaf are fine",
     node("root", min=TOTAL, max=TOTAL, namespaces=("user-a",)),
     []),
    ("a namespace in two leaves",
     two_level(node("a", namespaces=("user-a",)), node("b", namespaces=("user-b", "user-a"))),
     [("root/b", "namespace-in-one-leaf")]),
    ("a namespace twice in one leaf",
     two_level(node("a", namespaces=("user-a", "user-a"))),
     [("root/a", "namespace-in-one-leaf")]),
    ("names differing only in case",
     two_level(node("Team"), node("team")),
     [("root/team", "unique-names")]),
    ("a child named like the root",
     two_level(node("ROOT")),
     [("root/ROOT", "unique-names")]),
    ("a name repeated at another depth",
     two_level(node("a", children=(node("b"),)), node("b")),
     [("root/b", "unique-names")]),
    ("an empty name",
     two_level(node("")),
     [("root/", "name")]),
    ("a name with a slash",
     two_level(node("a/b")),
     [("root/a/b", "name")]),
    ("a name with spaces around it",
     two_level(node(" a")),
     [("root/ a", "name")]),
    # Issue 17 hole 4: a node's name becomes the quota label of every job and pod under it.
    ("a name with an accent", two_level(node("Département-ä")), [("root/Département-ä", "label-value")]),
    ("a name with a space inside", two_level(node("team b")), [("root/team b", "label-value")]),
    ("an emoji name", two_level(node("\N{ROCKET}")), [("root/\N{ROCKET}", "label-value")]),
    ("a name over 63 characters", two_level(node("d" * 64)), [("root/" + "d" * 64, "label-value")]),
    ("a leading dash", two_level(node("-team")), [("root/-team", "label-value")]),
    ("a trailing dot", two_level(node("team.")), [("root/team.", "label-value")]),
    ("an inner node too", two_level(node("team b", children=(node("x"),))), [("root/team b", "label-value")]),
    ("63 characters, dots and underscores are fine", two_level(node("a" * 60 + "_.b")), []),
    ("a negative quantity",
     two_level(node("a", max=res(cpu=-1))),
     [("root/a", "quantity")]),
    ("a negative min",
     two_level(node("a", min=res(memory="-1Gi"))),
     [("root/a", "quantity")]),
    ("a fractional job count",
     two_level(node("a", max=res(max_jobs="1500m"))),
     [("root/a", "quantity")]),
    ("a whole job count",
     two_level(node("a", max=res(max_jobs=3))),
     []),
    ("an invalid namespace name",
     two_level(node("a", namespaces=("User_A",))),
     [("root/a", "namespace-name")]),
    ("a namespace name too long",
     two_level(node("a", namespaces=("n" * 64,))),
     [("root/a", "namespace-name")]),
    ("two leaf namespaces that would share one Queue",
     two_level(node("a-b", namespaces=("c",)), node("a", namespaces=("b-c",))),
     [("root/a", "queue-name-collision")]),
    ("several problems are all reported, in tree order",
     node("root", min=res(cpu=10), max=res(cpu=20), children=(
         node("a", min=res(cpu=30), max=res(cpu=25), namespaces=("x",)),
         node("A", max=res(cpu=30), namespaces=("x",)),
     )),
     [("root", "root-min-eq-max"), ("root", "children-min-le-parent-min"),
      ("root/a", "min-le-max"), ("root/a", "child-max-le-parent-max"),
      ("root/A", "unique-names"), ("root/A", "child-max-le-parent-max"),
      ("root/A", "namespace-in-one-leaf")]),
]


@pytest.mark.parametrize(("case", "root", "expected"), RULE_CASES, ids=[case for case, _, _ in RULE_CASES])
def test_validate_tree_reports_each_broken_rule(
    case: str, root: QuotaNode, expected: list[tuple[str, str]]
) -> None:
    assert rules(validate_tree(root)) == expected, case


@pytest.mark.parametrize(
    ("root", "fragments"),
    [
        (two_level(node("a", min=res(cpu=10), max=res(cpu=5))),
         ["min cpu=10 is greater than max cpu=5", "lower min or raise max"]),
        (node("root", min=res(cpu=50), max=res(cpu=100)),
         ["min and max must be equal", "min cpu=50 vs max cpu=100", "set both"]),
        (node("root", min=res(cpu=1, gpu=1), max=res(cpu=1)), ["max nvidia.com/gpu=unset"]),
        (two_level(node("a", min=res(memory="70Gi"), max=TOTAL), node("b", min=res(memory="40Gi"), max=TOTAL)),
         ["children's min add up to memory=110Gi", "this node's min memory=100Gi", "lower the children's min"]),
        (two_level(node("a", max=res(cpu=101))),
         ["max cpu=101 is greater than the parent's (root) max cpu=100", "lower it to at most 100"]),
        (two_level(node("a", namespaces=("user-a",)), node("b", namespaces=("user-a",))),
         ["'user-a'", "already in root/a", "exactly one leaf"]),
        (two_level(node("Team"), node("team")), ["'team'", "already used by root/Team", "ignoring case"]),
        (two_level(node("a", namespaces=("x",), children=(node("b"),))), ["namespaces x", "move them to a leaf"]),
        (two_level(node("a", max=res(cpu=-1))), ["max cpu=-1 is negative"]),
        (two_level(node("a", namespaces=("User_A",))), ["'User_A' is not a valid namespace name"]),
        (two_level(node("a/b")), ["contains '/'"]),
        (two_level(node("")), ["non-empty name"]),
        (two_level(node("team b")), ["'team b' is not a valid label value", "at most 63 characters",
                                     "rename the node (for example 'team-b')"]),
        (two_level(node("d" * 70)), ["has 70 characters", "shorten it"]),
        (two_level(node("\N{ROCKET}")), ["for example 'team-1'"]),
    ],
)
def test_violation_messages_say_what_and_what_to_do(root: QuotaNode, fragments: list[str]) -> None:
    text = "; ".join(str(v) for v in validate_tree(root))
    for fragment in fragments:
        assert fragment in text


def test_violation_str_names_path_and_rule() -> None:
    assert str(Violation("root/a", "min-le-max", "too big")) == "root/a: too big [rule: min-le-max]"


def test_a_node_built_with_a_wrong_path_is_reported() -> None:
    bad = QuotaNode(name="a", path=("a",))
    root = QuotaNode(name="root", path=("root",), children=(bad,))
    assert rules(validate_tree(root)) == [("root/a", "path")]


def test_the_root_max_need_not_cover_the_sum_of_the_childrens_max() -> None:
    # The seed's comment says otherwise, but its own example (two children of max 100 under a root of 100)
    # contradicts it: docs/quota-tree.md says it is not enforced.
    assert validate_tree(seed_root()) == []


def test_a_tree_deeper_than_the_limit_is_refused() -> None:
    deepest = node(f"n{MAX_DEPTH}")
    for level in range(MAX_DEPTH - 1, 0, -1):
        deepest = node(f"n{level}", children=(deepest,))
    root = node("root", children=(deepest,))
    assert ("root/" + "/".join(f"n{i}" for i in range(1, MAX_DEPTH)), "depth") in rules(validate_tree(root))
    assert validate_tree(deepest) == []  # exactly MAX_DEPTH levels is fine


def test_build_tree_raises_with_every_violation() -> None:
    with pytest.raises(QuotaTreeError) as caught:
        build_tree(two_level(node("a", min=res(cpu=10), max=res(cpu=5)), node("A")))
    assert [v.rule for v in caught.value.violations] == ["min-le-max", "unique-names"]
    assert "root/a: min cpu=10" in str(caught.value)
    assert "[rule: unique-names]" in str(caught.value)


# Parsing a spec ---------------------------------------------------------------------------------------------


def seed_spec() -> dict[str, Any]:
    return copy.deepcopy(SEED_TREE_SPEC)


def test_parse_tree_reads_every_field() -> None:
    spec = {"root": {
        "name": "root", "min": {"cpu": "10"}, "max": {"cpu": 10},
        "children": [{"name": "dept", "max": {"cpu": "5", "kube-queue/max-jobs": 2}, "namespaces": ["ns-1"],
                      "attributes": {"preempt-policy": "PreemptLowerPriority"}}],
    }}
    t = parse_tree(spec)
    dept = t.node("dept")
    assert dept.path == ("root", "dept")
    assert dept.max == res(cpu=5, max_jobs=2)
    assert dept.min == res()
    assert dept.namespaces == ("ns-1",)
    assert dict(dept.attributes) == {"preempt-policy": "PreemptLowerPriority"}
    assert t.leaf_for_namespace("ns-1") is dept


def _edit(path: list[Any], value: Any) -> dict[str, Any]:
    spec = seed_spec()
    target: Any = spec
    for step in path[:-1]:
        target = target[step]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return spec


_DELETE = object()
A = ["root", "children", 0]


@pytest.mark.parametrize(
    ("spec", "expected", "fragment"),
    [
        ("root: x", [("spec", "type")], "spec must be an object"),
        ({}, [("spec.root", "type")], "spec.root is missing"),
        ({"root": 3}, [("spec.root", "type")], "must be an object with a name"),
        (_edit(["root", "name"], _DELETE), [("spec.root", "name")], "non-empty name"),
        (_edit(["root", "name"], 7), [("spec.root", "name")], "non-empty name"),
        (_edit([*A, "name"], ""), [("root/children[0]", "name")], "non-empty name"),
        (_edit([*A, "max", "cpu"], "lots"), [("root/Department-a", "quantity")], "'cpu'"),
        (_edit([*A, "min", "memory"], "60GB"), [("root/Department-a", "quantity")], "'60GB'"),
        (_edit([*A, "min", "cpu"], 0.5), [("root/Department-a", "quantity")], "float"),
        (_edit([*A, "min"], "cpu=1"), [("root/Department-a", "type")], "min must be a resource list"),
        (_edit([*A, "namespaces"], "user-a"), [("root/Department-a", "type")], "namespaces must be a list"),
        (_edit([*A, "namespaces"], ["user-a", 3]), [("root/Department-a", "type")], "list of names"),
        (_edit(["root", "children"], {"name": "x"}), [("root", "type")], "children must be a list"),
        (_edit(["root", "children", 1], "oops"), [("root/children[1]", "type")], "quota node must be an object"),
        (_edit([*A, "attributes"], {"enabled": True}), [("root/Department-a", "type")], "quote values"),
        (_edit([*A, "attributes"], ["x"]), [("root/Department-a", "type")], "attributes must map"),
        # rules are checked once the shape is sound
        (_edit([*A, "min", "cpu"], 200), [("root/Department-a", "min-le-max"),
                                          ("root", "children-min-le-parent-min")], "greater than max"),
    ],
)
def test_parse_tree_reports_bad_specs(spec: Any, expected: list[tuple[str, str]], fragment: str) -> None:
    with pytest.raises(QuotaTreeError) as caught:
        parse_tree(spec)
    assert sorted(rules(list(caught.value.violations))) == sorted(expected)
    assert fragment in str(caught.value)
    assert sorted(rules(spec_violations(spec))) == sorted(expected)


def test_parse_tree_collects_every_shape_problem_at_once() -> None:
    spec = seed_spec()
    spec["root"]["children"][0]["max"]["cpu"] = "x"
    spec["root"]["children"][1]["namespaces"] = "user-c"
    spec["root"]["children"].append({"max": {"cpu": 1}})
    assert rules(spec_violations(spec)) == [
        ("root/Department-a", "quantity"),
        ("root/Department-b", "type"),
        ("root/children[2]", "name"),
    ]


def test_parse_tree_stops_at_the_depth_limit() -> None:
    spec: dict[str, Any] = {"name": f"n{MAX_DEPTH + 5}"}
    for level in range(MAX_DEPTH + 4, 0, -1):
        spec = {"name": f"n{level}", "children": [spec]}
    violations = spec_violations({"root": spec})
    assert [v.rule for v in violations] == ["depth"]


json_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)
node_keys = st.sampled_from(["name", "min", "max", "namespaces", "children", "attributes"])
quota_like = st.recursive(
    st.dictionaries(node_keys, json_junk, max_size=6),
    lambda inner: st.dictionaries(node_keys, json_junk | st.lists(inner, max_size=3), max_size=6),
    max_leaves=12,
)


@settings(max_examples=examples(300), deadline=None)
@given(spec=st.one_of(json_junk, st.fixed_dictionaries({"root": json_junk}),
                      st.fixed_dictionaries({"root": quota_like})))
def test_junk_specs_only_ever_raise_quota_tree_error(spec: Any) -> None:
    try:
        parse_tree(spec)
    except QuotaTreeError as error:
        assert error.violations
        assert all(v.rule and v.path and v.message for v in error.violations)
    assert isinstance(spec_violations(spec), list)
    assert isinstance(validate_tree_object({"metadata": {"namespace": "kube-system"}, "spec": spec}, 0), list)


# The whole object -------------------------------------------------------------------------------------------


def tree_object(namespace: Any = "kube-system", spec: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": namespace},
        "spec": seed_spec() if spec is None else spec,
    }


@pytest.mark.parametrize(
    ("obj", "existing", "expected"),
    [
        (tree_object(), 0, []),
        (tree_object(namespace="default"), 0, [("metadata.namespace", "tree-namespace")]),
        ({"spec": seed_spec()}, 0, [("metadata.namespace", "tree-namespace")]),
        ({"metadata": "x", "spec": seed_spec()}, 0, [("metadata.namespace", "tree-namespace")]),
        (tree_object(), 1, [("metadata.name", "one-tree-per-cluster")]),
        (tree_object(namespace="team"), 2,
         [("metadata.namespace", "tree-namespace"), ("metadata.name", "one-tree-per-cluster")]),
        (tree_object(spec=_edit([*A, "max", "cpu"], 101)), 0, [("root/Department-a", "child-max-le-parent-max")]),
        (tree_object(spec="nope"), 0, [("spec", "type")]),
        ("not an object", 0, [("ElasticQuotaTree", "type")]),
    ],
)
def test_validate_tree_object(obj: Any, existing: int, expected: list[tuple[str, str]]) -> None:
    assert rules(validate_tree_object(obj, existing)) == expected


def test_validate_tree_object_messages() -> None:
    text = "; ".join(map(str, validate_tree_object(tree_object(namespace="default"), 1)))
    assert "only honoured in namespace 'kube-system', not 'default'" in text
    assert "-n kube-system" in text
    assert "already has an ElasticQuotaTree" in text
    assert "edit" in text


# Names ------------------------------------------------------------------------------------------------------

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize(
    ("leaf", "namespace", "expected"),
    [
        ("Department-a", "user-a", "root-department-a-user-a"),
        ("Department-b", "user-c", "root-department-b-user-c"),
        ("team1", "ns", "root-team1-ns"),
    ],
)
def test_queue_name_of_plain_inputs_is_the_seeds(leaf: str, namespace: str, expected: str) -> None:
    assert queue_name(leaf, namespace) == expected


@pytest.mark.parametrize(
    ("leaf", "namespace"),
    [
        ("Dept_A", "user-a"),
        ("dept.a", "user-a"),
        ("Département", "user-a"),
        ("a  b", "user-a"),
        ("-edge-", "x"),
        ("x" * 80, "user-a"),
        ("d", "n" * 63),
        ("___", "___"),
    ],
)
def test_queue_name_is_always_a_valid_dns_label(leaf: str, namespace: str) -> None:
    name = queue_name(leaf, namespace)
    assert len(name) <= 63
    assert DNS_LABEL.fullmatch(name), name
    assert name.startswith("root-")
    assert name == queue_name(leaf, namespace)  # stable


def test_queue_names_of_sanitized_or_long_inputs_do_not_collide() -> None:
    pairs = [
        ("dept.a", "user-a"), ("dept_a", "user-a"), ("dept-a_", "user-a"),
        ("x" * 80, "user-a"), ("x" * 81, "user-a"), ("x" * 80, "user-b"),
        ("d", "n" * 62 + "a"), ("d", "n" * 62 + "b"),
    ]
    names = {queue_name(leaf, ns) for leaf, ns in pairs}
    assert len(names) == len(pairs)
    assert queue_name("x" * 80, "user-a").startswith("root-" + "x" * 40)


@given(leaf=st.text(min_size=1, max_size=100), namespace=st.text(min_size=1, max_size=70))
def test_queue_name_property(leaf: str, namespace: str) -> None:
    name = queue_name(leaf, namespace)
    assert len(name) <= 63
    assert DNS_LABEL.fullmatch(name)


def test_quota_fullname() -> None:
    t = seed_tree()
    assert quota_fullname(t, "department-a") == "root/Department-a"
    assert quota_fullname(t, "Department-B") == "root/Department-b"
    assert quota_fullname(t, "root") == "root"
    with pytest.raises(KeyError):
        quota_fullname(t, "department-z")


@pytest.mark.parametrize(
    ("where", "attributes", "problem"),
    [
        ("root", {"kube-queue.x-k8s.io/fair-sharing": "yes"}, "is not \"true\" or \"false\""),
        ("root/Department-a", {"kube-queue.x-k8s.io/fair-sharing": "true"}, "a leaf has no children"),
        ("root/Department-a", {"kube-queue.x-k8s.io/weight": "-1"}, "is not a positive number"),
        ("root/Department-a", {"kube-queue.x-k8s.io/weight": "heavy"}, "is not a positive number"),
        ("root/Department-a", {"kube-queue.x-k8s.io/reclaim-after": "soon"}, "is not a duration above zero"),
        ("root/Department-a", {"kube-queue.x-k8s.io/reclaim-after": "0s"}, "is not a duration above zero"),
    ],
)
def test_the_attributes_kube_queue_reads_are_checked(where: str, attributes: dict[str, str], problem: str) -> None:
    spec: dict[str, Any] = copy.deepcopy(SEED_TREE_SPEC)
    target = spec["root"] if where == "root" else spec["root"]["children"][0]
    target["attributes"] = attributes
    with pytest.raises(QuotaTreeError) as raised:
        parse_tree(spec)
    violations = [v for v in raised.value.violations if v.rule == "attribute"]
    assert len(violations) == 1 and violations[0].path == where and problem in violations[0].message


def test_valid_attributes_and_unknown_ones_pass() -> None:
    spec: dict[str, Any] = copy.deepcopy(SEED_TREE_SPEC)
    spec["root"]["attributes"] = {"kube-queue.x-k8s.io/fair-sharing": "True", "team": "anything"}
    spec["root"]["children"][0]["attributes"] = {"kube-queue.x-k8s.io/weight": "3/2",
                                                 "kube-queue.x-k8s.io/reclaim-after": "1h30m"}
    assert parse_tree(spec).nodes["department-a"].attributes["kube-queue.x-k8s.io/weight"] == "3/2"

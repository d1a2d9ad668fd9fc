"""The admission fuzz tier (issue 17): Hypothesis over AdmissionReview bodies of every kind we admit - the six
job kinds, ElasticQuotaTrees, ResourcePolicies and Queues - created and updated by a user and by the
controller, each sent to both /mutate and /validate through :func:`webhook.admission.app.respond` (the
service's whole request path but the socket).

Every answer must be a well-formed review (never a 5xx, never an internal error: a handler exception is
answered as a refusal with code 500, which fails here), and every refusal must name the field it is about
(a field path such as ``spec.template.spec.priority`` / ``/spec/parallelism`` / ``request.kind``, or for a
quota tree the node and the rule, ``root/team b: ... [rule: label-value]``).

At least :data:`MINIMUM_REQUESTS` requests are generated per full run (each test's examples times the
requests per example); the module checks the tally when every test ran.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import SEED_TREE_SPEC, seed_tree
from tests.service.helpers import CONTROLLER, JOB_BUILDERS, USER, patched, review
from webhook.admission.app import respond
from webhook.admission.mutate import mutate
from webhook.admission.state import AdmissionState, Settings
from webhook.core.limitrange import container_defaults

MINIMUM_REQUESTS = 10_000
LIMIT_RANGE = {"spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "1", "memory": "1Gi"}}]}}
STATE = AdmissionState(
    tree=seed_tree(),
    priority_classes={"high": 1000, "low": 1},
    limit_defaults={"user-a": container_defaults([LIMIT_RANGE])},
)
SETTINGS = Settings(controller_users=frozenset({CONTROLLER}))
TALLY: dict[str, int] = {}
FIELD = re.compile(
    r"(?:^|[\s'\"(\[:;])(?:/(?:spec|metadata|status)\b|(?:spec|metadata|request|status)(?:[.\[:]|\b))"
    r"|\[rule: [a-z-]+\]|^not a usable AdmissionReview: apiVersion and kind:|is invalid: (?:kind|apiVersion):"
)
"""A field path (``spec.x``, ``/spec/x``, ``request.kind``, ``metadata.labels[...]``, a top-level ``kind:``) or
a tree rule id."""
FUZZ = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

# Values ------------------------------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.sampled_from([0, 1, -1, 2, 6, 10**9, 2**31])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["", "1", "10", "500m", "10Gi", "-1", "1e3", "lots", "0.5", "high", "low", "true"])
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
names = st.sampled_from(
    ["Department-a", "team-b", "Département-ä", "team b", "-team", "d" * 64, "a/b", "", " x", "\N{ROCKET}", "ok_1.2"]
) | st.text(max_size=10)
quantities = st.sampled_from([0, 1, 10, 100, "10Gi", "500m", "-1", "lots", "1.5", None])


def _paths(value: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every path inside a JSON value (its members and items, recursively)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*prefix, index)
            yield from _paths(item, (*prefix, index))


@st.composite
def mangled(draw: st.DrawFn, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with up to three of its fields (anywhere, at any depth) replaced by arbitrary JSON or deleted."""
    out = copy.deepcopy(obj)
    for _ in range(draw(st.integers(0, 3))):
        paths = list(_paths(out))
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = out
        for step in path[:-1]:
            parent = parent[step]
        if draw(st.booleans()):
            parent[path[-1]] = draw(json_values)
        elif isinstance(parent, dict):
            del parent[path[-1]]
    return out


@st.composite
def job_objects(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A job of any kind with the fields the queue reads set to drawn values, then mangled."""
    kind = draw(st.sampled_from(sorted(JOB_BUILDERS)))
    obj: dict[str, Any] = JOB_BUILDERS[kind]()
    templates = [path for path in _paths(obj) if path and path[-1] == "template"] or [()]
    template_path = draw(st.sampled_from(templates))
    target: Any = obj
    for step in template_path:
        target = target[step]
    spec = target.setdefault("spec", {}) if isinstance(target, dict) else {}
    if draw(st.booleans()):
        spec["priority"] = draw(st.sampled_from([0, 1, 1000, 10**9, -5]))
    if draw(st.booleans()):
        spec["priorityClassName"] = draw(st.sampled_from(["high", "low", "unknown", ""]))
    if draw(st.booleans()) and kind == "Job":
        obj["spec"]["parallelism"] = draw(st.integers(-2, 50))
    if draw(st.booleans()):
        obj.setdefault("metadata", {}).setdefault("labels", {})["quota.scheduling.alibabacloud.com/name"] = draw(names)
    return kind, draw(mangled(obj))


@st.composite
def tree_nodes(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    node: dict[str, Any] = {"name": draw(names), "min": {"cpu": draw(quantities)}, "max": {"cpu": draw(quantities)}}
    if depth < 2 and draw(st.booleans()):
        node["children"] = draw(st.lists(tree_nodes(depth + 1), max_size=3))
    else:
        node["namespaces"] = draw(st.lists(st.sampled_from(["user-a", "user-b", "User_A", "x" * 70, ""]), max_size=2))
    return node


@st.composite
def tree_objects(draw: st.DrawFn) -> dict[str, Any]:
    spec = copy.deepcopy(SEED_TREE_SPEC) if draw(st.booleans()) else {"root": draw(tree_nodes())}
    obj = {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": draw(st.sampled_from(["kube-system", "default"]))},
        "spec": spec,
    }
    return draw(mangled(obj))


units = st.fixed_dictionaries(
    {"resource": st.sampled_from(["ecs", "eci", "gpu", ""])},
    optional={
        "max": st.sampled_from([0, 3, -1, "2", None]),
        "nodeSelector": st.dictionaries(st.sampled_from(["pool", "zone", "bad key!"]), st.sampled_from(["a", "-"])),
        "podLabels": st.dictionaries(st.sampled_from(["tier", "x/y"]), st.sampled_from(["eci", "ok"])),
    },
)


@st.composite
def policy_objects(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": draw(st.dictionaries(st.sampled_from(["app", "bad key"]), st.sampled_from(["x", ""]), max_size=2)),
        "strategy": draw(st.sampled_from(["prefer", "spread"])),
        "units": draw(st.lists(units, max_size=5)),
    }
    if draw(st.booleans()):
        spec["whenTryNextUnits"] = {
            "policy": draw(st.sampled_from(["LackResourceOrExceedMax", "ExceedMax", "TimeoutOrExceedMax", "Later"])),
            "timeout": draw(st.sampled_from(["1m", "-1m", "soon", 60])),
        }
    obj = {
        "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
        "kind": "ResourcePolicy",
        "metadata": {"name": "rp", "namespace": "user-a"},
        "spec": spec,
    }
    return draw(mangled(obj))


@st.composite
def queue_objects(draw: st.DrawFn) -> dict[str, Any]:
    obj = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "root-department-a-user-a", "namespace": "kube-queue"},
        "spec": {"queuePolicy": draw(st.sampled_from(["Round", "Priority", "Block", "Fifo", 3]))},
    }
    return draw(mangled(obj))


# The checks ------------------------------------------------------------------------------------------------


def check(endpoint: str, body: Any) -> None:
    """One request: a well-formed answer, never a 5xx or an internal error; a refusal names its field."""
    status, payload = respond(endpoint, orjson.dumps(body), STATE, SETTINGS)
    TALLY[endpoint] = TALLY.get(endpoint, 0) + 1
    assert status < 500
    out = orjson.loads(payload)
    if status != 200:
        assert status in (400, 404, 413) and isinstance(out.get("error"), str)
        return
    response = out["response"]
    if response["allowed"]:
        return
    result = response["status"]
    assert result["code"] < 500, result["message"]
    assert "internal error" not in result["message"]
    assert FIELD.search(result["message"]), f"the refusal names no field: {result['message']!r}"


def check_both(body: Any) -> None:
    check("mutate", body)
    check("validate", body)


def envelope(
    kind: str, obj: Any, *, operation: str = "CREATE", old: Any = None, user: str = USER
) -> dict[str, Any]:
    """The review the API server sends for ``obj`` (any JSON: the object may be mangled anywhere); its
    ``request.kind`` comes from the resource, as the API server's does, not from the object."""
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    stub = {"kind": kind, "metadata": {"name": name if isinstance(name, str) else "", "namespace": "user-a"}}
    body = review(stub, kind=kind, operation=operation, user=user, namespace="user-a")
    body["request"]["object"] = obj
    body["request"]["oldObject"] = old
    return body


def create_and_update(kind: str, obj: dict[str, Any], changed: dict[str, Any], user: str) -> None:
    """CREATE ``obj``; UPDATE from ``obj`` as the mutating webhook would have stored it to ``changed``."""
    check_both(envelope(kind, obj, user=user))
    try:
        stored = patched(obj, mutate(envelope(kind, obj), STATE, SETTINGS))
    except Exception:  # a refused or unreadable object is stored as written (e.g. by the controller)
        stored = obj
    check_both(envelope(kind, changed, operation="UPDATE", old=stored, user=user))


users = st.sampled_from([USER, USER, USER, CONTROLLER])


@settings(FUZZ, max_examples=1300)
@given(job=job_objects(), data=st.data(), user=users)
def test_job_reviews_of_every_kind(job: tuple[str, dict[str, Any]], data: st.DataObject, user: str) -> None:
    kind, obj = job
    create_and_update(kind, obj, data.draw(mangled(obj)), user)


@settings(FUZZ, max_examples=400)
@given(obj=tree_objects(), data=st.data(), user=users)
def test_quota_tree_reviews(obj: dict[str, Any], data: st.DataObject, user: str) -> None:
    create_and_update("ElasticQuotaTree", obj, data.draw(mangled(obj)), user)


@settings(FUZZ, max_examples=400)
@given(obj=policy_objects(), data=st.data(), user=users)
def test_resource_policy_reviews(obj: dict[str, Any], data: st.DataObject, user: str) -> None:
    create_and_update("ResourcePolicy", obj, data.draw(mangled(obj)), user)


@settings(FUZZ, max_examples=200)
@given(obj=queue_objects(), data=st.data(), user=users)
def test_queue_reviews(obj: dict[str, Any], data: st.DataObject, user: str) -> None:
    create_and_update("Queue", obj, data.draw(mangled(obj)), user)


@settings(FUZZ, max_examples=300)
@given(job=job_objects(), data=st.data())
def test_mangled_envelopes(job: tuple[str, dict[str, Any]], data: st.DataObject) -> None:
    body = envelope(*job)
    fields = ["kind", "uid", "operation", "object", "oldObject", "userInfo", "namespace", "name", "subResource"]
    body["request"][data.draw(st.sampled_from(fields))] = data.draw(json_values)
    check_both(body)
    check_both(data.draw(mangled(body)))


@pytest.fixture(scope="module", autouse=True)
def enough_requests(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a full run of the module, at least :data:`MINIMUM_REQUESTS` requests were checked."""
    TALLY.clear()
    yield
    selected = {item.name for item in request.session.items if getattr(item, "module", None) is request.module}
    everything = {name for name in globals() if name.startswith("test_")}
    if selected == everything and request.session.testsfailed == 0:
        assert sum(TALLY.values()) >= MINIMUM_REQUESTS, TALLY


def test_the_field_pattern_tells_fields_from_prose() -> None:
    assert FIELD.search("kube-queue cannot read Job user-a/pi: /spec/parallelism: expected an integer")
    assert FIELD.search("not a usable AdmissionReview: request.kind is missing")
    assert FIELD.search("x is invalid: root/team b: the name ... [rule: label-value]")
    assert FIELD.search("Job user-a/pi is queued: metadata.labels[q]: the quota label may not change")
    assert not FIELD.search("kube-queue could not check Job user-a/pi: internal error (KeyError)")

"""LimitRange defaults as LimitRanger applies them (webhook/core/limitrange.py)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.limitrange import NO_DEFAULTS, container_defaults, container_lists, missing_requests


def limit_range(*items: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "LimitRange", "spec": {"limits": list(items)}}


def container(**resources: dict[str, str]) -> dict[str, Any]:
    return {"name": "c", "resources": resources}


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        ([], {}),
        ([limit_range({"type": "Container", "defaultRequest": {"cpu": "500m"}, "default": {"cpu": "1"}})],
         {"cpu": "500m"}),
        ([limit_range({"type": "Container", "default": {"memory": "1Gi"}})], {"memory": "1Gi"}),
        ([limit_range({"type": "Pod", "max": {"cpu": "4"}})], {}),
        ([limit_range({"type": "Container", "defaultRequest": {"cpu": "lots", "memory": "1Gi", "x": True}})],
         {"memory": "1Gi"}),
        (  # LimitRanger applies the LimitRanges in turn: the first that sets a resource wins
            [limit_range({"type": "Container", "defaultRequest": {"cpu": "1"}}),
             limit_range({"type": "Container", "defaultRequest": {"cpu": "2", "memory": "2Gi"}})],
            {"cpu": "1", "memory": "2Gi"},
        ),
        (  # within one LimitRange, a later item overwrites an earlier one
            [limit_range({"type": "Container", "defaultRequest": {"cpu": "1"}},
                         {"type": "Container", "defaultRequest": {"cpu": "3"}})],
            {"cpu": "3"},
        ),
        ([{"spec": "junk"}, {"spec": {"limits": "junk"}}, limit_range("junk")], {}),  # type: ignore[arg-type]
    ],
)
def test_container_defaults(objects: list[dict[str, Any]], expected: dict[str, str]) -> None:
    assert dict(container_defaults(objects).requests) == expected


DEFAULTS = container_defaults([limit_range({"type": "Container", "defaultRequest": {"cpu": "1", "memory": "1Gi"}})])


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"name": "c"}, {"cpu": "1", "memory": "1Gi"}),
        (container(requests={"cpu": "2"}), {"memory": "1Gi"}),
        (container(limits={"memory": "4Gi"}), {"cpu": "1"}),  # a limit stands in for its request
        (container(requests={"cpu": "2", "memory": "2Gi"}), {}),
        ({"name": "c", "resources": "junk"}, {"cpu": "1", "memory": "1Gi"}),
    ],
)
def test_missing_requests(given: dict[str, Any], expected: dict[str, str]) -> None:
    assert missing_requests(given, DEFAULTS) == expected
    assert missing_requests(given, NO_DEFAULTS) == {}


def test_container_lists_are_init_containers_then_containers() -> None:
    spec = {"containers": [{"name": "a"}], "initContainers": [{"name": "i"}], "ephemeralContainers": [{}]}
    assert container_lists(spec) == [("initContainers", [{"name": "i"}]), ("containers", [{"name": "a"}])]
    assert container_lists({"containers": "junk"}) == []

"""What a job cache keeps of an object (webhook/kube/slim.py, issue 38): the same values, less memory."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from webhook.api.names import LAST_APPLIED_ANNOTATION
from webhook.api.objects import labels_of, spec_of
from webhook.kube.slim import SHARED_TEXT_MAX, compacted

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


@given(body=st.dictionaries(st.text(max_size=8), _json, max_size=4), annotations=st.dictionaries(
    st.text(max_size=8), st.text(max_size=80), max_size=3), managed=st.booleans(), applied=st.booleans())
def test_a_compacted_object_reads_the_same_but_for_what_no_cache_reads(
    body: dict[str, Any], annotations: dict[str, str], managed: bool, applied: bool
) -> None:
    obj: dict[str, Any] = {**body, "metadata": {"name": "j", "annotations": dict(annotations)}}
    expected = copy.deepcopy(obj)
    if managed:
        obj["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    if applied:
        obj["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] = '{"kind": "Job"}'
    expected["metadata"]["annotations"].pop(LAST_APPLIED_ANNOTATION, None)
    assert compacted(obj) == expected


def test_short_texts_are_shared_between_objects_and_long_ones_left_alone() -> None:
    def decoded() -> dict[str, Any]:  # new text objects each time, as a decoder makes them
        short, long = "-".join(["If", "Not", "Present"]), "x" * (SHARED_TEXT_MAX + 1)
        return {"metadata": {"name": "j", "labels": {"a": short}}, "spec": {"list": [short, [short]], "long": long}}

    first, second = compacted(decoded()), compacted(decoded())
    assert labels_of(first)["a"] is labels_of(second)["a"]
    texts, nested = spec_of(first)["list"], spec_of(second)["list"]
    assert isinstance(texts, list) and isinstance(nested, list) and isinstance(nested[1], list)
    assert texts[0] is nested[1][0]
    assert spec_of(first)["long"] == spec_of(second)["long"]


def test_an_object_without_usable_metadata_is_kept() -> None:
    assert compacted({"metadata": "odd", "spec": ["a"]}) == {"metadata": "odd", "spec": ["a"]}
    assert compacted({}) == {}

"""The dev cluster's fake kubelet reads the annotations webhook/api/names.py defines, in both spellings."""

from __future__ import annotations

from pathlib import Path

import yaml

from webhook.api import names

STAGES = Path(__file__).resolve().parents[2] / "webhook" / "devcluster" / "kwok-stages.yaml"


def _selectors(stage_name: str) -> str:
    stages = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(STAGES.read_text())}
    spec = stages[stage_name]["spec"]
    keys = [expr["key"] for expr in spec["selector"]["matchExpressions"]]
    return " ".join([*keys, spec["delay"]["durationFrom"]["expressionFrom"]])


def test_the_succeed_and_fail_stages_read_the_current_and_the_legacy_annotation() -> None:
    for stage, current, legacy in (
        ("kq-pod-succeed", names.SUCCEED_AFTER_ANNOTATION, names.LEGACY_SUCCEED_AFTER_ANNOTATION),
        ("kq-pod-fail", names.FAIL_AFTER_ANNOTATION, names.LEGACY_FAIL_AFTER_ANNOTATION),
    ):
        text = _selectors(stage)
        assert text.count(f'["{current}"]') == 2, stage  # the selector and the delay
        assert text.count(f'["{legacy}"]') == 2, stage
        assert text.index(current) < text.index(legacy), "the current spelling wins"

"""A job's status is one vocabulary (webhook/api/statuses.py): every face prints, filters and serialises the same
words, and ``-o yaml`` can write them."""

from __future__ import annotations

import json

import orjson
import yaml

from webhook.api.statuses import FINAL, STARTED, WAITING, JobStatus


def test_each_status_is_its_word_everywhere() -> None:
    for status in JobStatus:
        assert status == status.value == str(status) == f"{status}"
        assert status.value.isupper()
        assert json.loads(json.dumps({"status": status})) == {"status": status.value}
        assert orjson.loads(orjson.dumps({"status": status})) == {"status": status.value}
    assert {"QUEUING", "BACKOFF"} == WAITING
    assert {"SUCCEEDED", "FAILED"} == FINAL
    assert {"PENDING", "RUNNING"} == STARTED


def test_the_groups_do_not_overlap_and_leave_only_a_suspended_job_out() -> None:
    assert not (WAITING & FINAL or WAITING & STARTED or FINAL & STARTED)
    assert set(JobStatus) - (WAITING | FINAL | STARTED) == {JobStatus.SUSPENDED}


def test_a_status_filter_typed_by_a_user_matches_the_members() -> None:
    """``kq list --status queuing,running`` compares the user's words with the members."""
    wanted = {word.upper() for word in ["queuing", "running"]}
    assert JobStatus.QUEUING in wanted and JobStatus.RUNNING in wanted and JobStatus.PENDING not in wanted


def test_a_summary_with_a_status_value_dumps_as_yaml() -> None:
    """PyYAML's safe dumper refuses str subclasses, so the faces write ``status.value``."""
    assert yaml.safe_dump({"status": JobStatus.QUEUING.value}) == "status: QUEUING\n"

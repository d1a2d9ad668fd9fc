"""Both API clients read a refusal the same way (webhook/api/errors.py)."""

from __future__ import annotations

import json

import pytest

from webhook.api.errors import ApiStatusError, status_error
from webhook.kube.client import KubeApiError
from webhook.readmodel.kubeapi import ApiError

STATUS = json.dumps({"kind": "Status", "reason": "Forbidden", "message": 'jobs "pi" is forbidden'}).encode()


@pytest.mark.parametrize("cls", [ApiError, KubeApiError])
def test_a_status_body_gives_the_reason_and_the_message(cls: type[ApiStatusError]) -> None:
    error = status_error(cls, 403, "Forbidden", STATUS)
    assert isinstance(error, ApiStatusError) and isinstance(error, cls)
    assert (error.status, error.reason, error.message) == (403, "Forbidden", 'jobs "pi" is forbidden')
    assert error.forbidden and not error.not_found and not error.conflict and not error.gone
    assert error.body["kind"] == "Status"
    assert error.one_line() == 'jobs "pi" is forbidden (403 Forbidden)'


@pytest.mark.parametrize(("raw", "message"), [(b"<html>bad gateway</html>\n", "<html>bad gateway</html>"),
                                              (b"[1, 2]", "[1, 2]"), (b"", "")])
def test_any_other_body_is_kept_as_the_message(raw: bytes, message: str) -> None:
    error = status_error(ApiError, 502, "Bad Gateway", raw)
    assert (error.status, error.reason, error.message) == (502, "Bad Gateway", message)


def test_each_client_keeps_its_own_wording() -> None:
    assert str(KubeApiError(404, "NotFound", "gone")) == "HTTP 404 NotFound: gone"
    assert str(ApiError(404, "NotFound", "queues \"q\" not found")) == 'queues "q" not found (404 NotFound)'
    assert KubeApiError(410, "Expired").gone and KubeApiError(409, "Conflict").conflict
    assert ApiError(0, "Unreachable", "cannot reach the API server").one_line() == "cannot reach the API server"

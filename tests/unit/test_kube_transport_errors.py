"""The shells' client turns a transport failure into a ``KubeApiError`` with status 0, the cause kept."""

from __future__ import annotations

import aiohttp
import pytest

from webhook.kube.client import KubeApiError, _TransportErrors


def test_a_timeout_says_what_did_not_come_in_time() -> None:
    cause = TimeoutError()
    with pytest.raises(KubeApiError) as caught, _TransportErrors("GET /api/v1/pods", "no answer in time"):
        raise cause
    assert (caught.value.status, caught.value.reason) == (0, "Timeout")
    assert caught.value.message == "GET /api/v1/pods: no answer in time"
    assert caught.value.__cause__ is cause


def test_a_connection_failure_names_the_error() -> None:
    with pytest.raises(KubeApiError) as caught, _TransportErrors("watch pods", "silent for too long"):
        raise aiohttp.ClientConnectionError("reset")
    assert (caught.value.status, caught.value.reason, caught.value.message) == (0, "ConnectionError",
                                                                                "watch pods: reset")


def test_a_server_timeout_is_a_timeout() -> None:
    """aiohttp's read timeout is both a ClientError and a TimeoutError: it reads as a timeout."""
    with pytest.raises(KubeApiError) as caught, _TransportErrors("GET /x", "answer not read in time"):
        raise aiohttp.ServerTimeoutError()
    assert caught.value.reason == "Timeout"


def test_other_errors_and_success_pass_through() -> None:
    errors = _TransportErrors("GET /x", "late")
    with pytest.raises(ValueError, match="mine"), errors:
        raise ValueError("mine")
    with errors:
        done = True
    assert done

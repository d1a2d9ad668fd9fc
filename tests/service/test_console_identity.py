"""The console acts as its user: the token reaches the API server on every request (over real HTTP), the API's
401 and 403 become clear messages, proxy headers and the dev kubeconfig mode work as documented, and no token
ever appears in the logs or in what the browser gets back."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.service.apiserver_http import HttpApiserver, serving
from webhook.cli.main import main
from webhook.console.app import ConsoleSettings, build_app
from webhook.console.identity import SESSION_COOKIE, IdentitySettings, Sessions, TokenError, clean_token
from webhook.readmodel.kubeconfig import Connection, Credentials

TOKEN = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2VuLW9mLWFsaWNl.c2lnbmF0dXJl"
CONSOLE_TOKEN = "console-own-token-never-used-for-users"
Client = TestClient[Any, Any]


@pytest.fixture
async def apiserver() -> AsyncIterator[tuple[HttpApiserver, str]]:
    server = HttpApiserver({TOKEN: "alice"})
    async with serving(server) as url:
        yield server, url


def settings_for(url: str, **identity: Any) -> ConsoleSettings:
    cluster = Connection(server=url, namespace="user-a", credentials=Credentials(token=CONSOLE_TOKEN))
    return ConsoleSettings(identity=IdentitySettings(cluster=cluster, **identity), default_namespace="user-a")


async def started(settings: ConsoleSettings) -> Client:
    client: Client = TestClient(TestServer(build_app(settings)))
    await client.start_server()
    return client


async def test_without_an_identity_pages_ask_for_a_token(apiserver: tuple[HttpApiserver, str]) -> None:
    server, url = apiserver
    client = await started(settings_for(url))
    try:
        answer = await client.get("/jobs?namespace=user-a", allow_redirects=False)
        assert answer.status == 303
        assert answer.headers["Location"] == "/login?next=/jobs?namespace=user-a"
        answer = await client.post("/submit", data={"kind": "job", "action": "create"})
        assert answer.status == 401
        assert "sign in with your bearer token" in await answer.text()
        assert server.seen == []  # nothing went to the cluster as the console itself
    finally:
        await client.close()


async def test_the_pasted_token_goes_with_every_request_and_never_the_consoles(
    apiserver: tuple[HttpApiserver, str],
) -> None:
    server, url = apiserver
    client = await started(settings_for(url))
    try:
        answer = await client.post("/login", data={"token": f"  Bearer {TOKEN}\n", "next": "/jobs"},
                                   allow_redirects=False)
        assert answer.status == 303 and answer.headers["Location"] == "/jobs"
        cookie = answer.cookies[SESSION_COOKIE]
        assert TOKEN not in cookie.value and cookie["httponly"] and cookie["samesite"] == "Strict"
        page = await client.get("/jobs?namespace=user-a")
        assert page.status == 200
        html = await page.text()
        assert 'acting as <b id="who">alice</b>' in html
        assert TOKEN not in html
        assert len(server.seen) > 3
        assert {seen.authorization for seen in server.seen} == {f"Bearer {TOKEN}"}
        assert any(seen.path == "/apis/batch/v1/namespaces/user-a/jobs" for seen in server.seen)
        # Signing out forgets the token: the next page asks for it again.
        await client.post("/logout", allow_redirects=False)
        answer = await client.get("/jobs", allow_redirects=False)
        assert answer.status == 303 and answer.headers["Location"].startswith("/login")
    finally:
        await client.close()


async def test_a_token_the_cluster_refuses_is_a_clear_401(apiserver: tuple[HttpApiserver, str]) -> None:
    _, url = apiserver
    client = await started(settings_for(url))
    try:
        answer = await client.post("/login", data={"token": "not-a-known-token"})
        assert answer.status == 401
        assert "The cluster does not accept this token (Unauthorized): paste a valid one." in (
            await answer.text())
        assert SESSION_COOKIE not in answer.cookies
    finally:
        await client.close()


async def test_a_namespace_rbac_refuses_is_a_clear_403(apiserver: tuple[HttpApiserver, str]) -> None:
    server, url = apiserver
    server.refuse["/apis/batch/v1/namespaces/user-c/"] = 403
    client = await started(settings_for(url))
    try:
        await client.post("/login", data={"token": TOKEN})
        answer = await client.get("/jobs?namespace=user-c")
        assert answer.status == 403
        text = await answer.text()
        assert "cannot list jobs in namespace user-c" in text
        assert "User &#34;alice&#34; cannot list resource &#34;jobs&#34;" in text
    finally:
        await client.close()


async def test_a_token_that_expires_after_sign_in_asks_to_sign_in_again(apiserver: tuple[HttpApiserver, str]) -> None:
    server, url = apiserver
    client = await started(settings_for(url))
    try:
        await client.post("/login", data={"token": TOKEN})
        server.users.clear()
        answer = await client.get("/jobs?namespace=user-a")
        assert answer.status == 401
        assert "sign in again" in await answer.text()
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("pasted", "message"),
    [
        ("", "paste a bearer token: the field is empty"),
        ("   ", "paste a bearer token: the field is empty"),
        ("two words", "holds characters a token cannot have (space)"),
        ("a" * 20000, "longer than 16384 characters"),
        ("tok\x00en", "holds characters a token cannot have"),
    ],
)
async def test_a_pasted_text_that_is_no_token_is_a_400(
    apiserver: tuple[HttpApiserver, str], pasted: str, message: str
) -> None:
    server, url = apiserver
    client = await started(settings_for(url))
    try:
        answer = await client.post("/login", data={"token": pasted})
        assert answer.status == 400
        assert message in await answer.text()
        assert server.seen == []
    finally:
        await client.close()


async def test_a_proxys_token_header_is_the_identity(apiserver: tuple[HttpApiserver, str]) -> None:
    server, url = apiserver
    client = await started(settings_for(url, token_header="X-Forwarded-Access-Token"))
    try:
        answer = await client.get("/jobs", headers={"X-Forwarded-Access-Token": TOKEN})
        assert answer.status == 200
        assert {seen.authorization for seen in server.seen} == {f"Bearer {TOKEN}"}
        answer = await client.get("/jobs")
        assert answer.status == 200  # the login page: no header, no session
        assert "sign in" in (await answer.text()).lower()
    finally:
        await client.close()


async def test_a_proxys_user_header_is_impersonated(apiserver: tuple[HttpApiserver, str]) -> None:
    server, url = apiserver
    server.users[CONSOLE_TOKEN] = "kube-queue-console"
    client = await started(settings_for(url, user_header="X-Remote-User"))
    try:
        answer = await client.get("/jobs", headers={"X-Remote-User": "bob"})
        assert answer.status == 200
        assert 'acting as <b id="who">bob</b>' in await answer.text()
        assert {(seen.authorization, seen.impersonate) for seen in server.seen} == {(f"Bearer {CONSOLE_TOKEN}", "bob")}
    finally:
        await client.close()


async def test_the_dev_mode_acts_as_the_kubeconfig_user(apiserver: tuple[HttpApiserver, str]) -> None:
    server, url = apiserver
    server.users[CONSOLE_TOKEN] = "admin"
    client = await started(settings_for(url, act_as_kubeconfig=True))
    try:
        answer = await client.get("/jobs")
        assert answer.status == 200
        assert {seen.authorization for seen in server.seen} == {f"Bearer {CONSOLE_TOKEN}"}
    finally:
        await client.close()


def test_the_dev_mode_refuses_to_listen_beyond_loopback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["console", "--act-as-kubeconfig", "--host", "0.0.0.0"]) == 2
    assert "only listens on loopback" in capsys.readouterr().err


async def test_no_token_is_ever_logged(apiserver: tuple[HttpApiserver, str], caplog: pytest.LogCaptureFixture) -> None:
    server, url = apiserver
    caplog.set_level(logging.DEBUG)
    client = await started(settings_for(url, token_header="X-Token"))
    try:
        await client.post("/login", data={"token": TOKEN})
        await client.get("/jobs?namespace=user-a")
        await client.get("/jobs/user-a/job/none")
        await client.post("/submit", data={"kind": "job", "namespace": "user-a", "name": "x", "image": "busybox",
                                           "workers": "1", "gpus": "0", "action": "create"})
        await client.get("/operator")
        await client.get("/jobs", headers={"X-Token": TOKEN + "x"})
        await client.post("/login", data={"token": TOKEN + " broken"})
        server.users.clear()
        await client.get("/jobs?namespace=user-a")
    finally:
        await client.close()
    records = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''} {json.dumps(r.args, default=str)}"
                        for r in caplog.records)
    assert caplog.records, "nothing was logged: the test would prove nothing"
    assert TOKEN not in records
    assert TOKEN not in caplog.text


def test_sessions_forget_a_token_after_its_lifetime() -> None:
    now = [0.0]
    sessions = Sessions(clock=lambda: now[0], lifetime=60)
    key = sessions.open(TOKEN, "alice")
    assert key != TOKEN and len(key) >= 40
    now[0] = 59
    assert sessions.token(key) == TOKEN  # used: its lifetime starts again
    now[0] = 118
    assert sessions.token(key) == TOKEN
    now[0] = 179
    assert sessions.token(key) is None
    assert len(sessions) == 0
    assert sessions.token(None) is None


def test_clean_token_never_repeats_the_token_in_its_message() -> None:
    with pytest.raises(TokenError) as error:
        clean_token(TOKEN + " and more")
    assert TOKEN not in str(error.value)

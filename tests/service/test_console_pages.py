"""The web console's handlers over the fake API server (the seed's cluster of ``tests/unit/test_cli_golden.py``):
the jobs list, why a job waits (the very text of ``kq why``), submit with bad input on every field, delete,
the operator page, and the live streams."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.builders import cluster_pod
from tests.clirun import NOW, run, seed_api
from tests.fakeapi import FakeApi
from tests.loose_world import loose_api
from webhook.api import kinds
from webhook.api.names import FAIR_SHARING_ATTRIBUTE
from webhook.console.app import ConsoleSettings, build_app
from webhook.console.identity import Identity, IdentitySettings
from webhook.readmodel.kubeapi import KubeApi, Ref
from webhook.readmodel.kubeconfig import Connection

TOKEN = "token-of-user-a.0123456789"


def console(api: FakeApi, **kwargs: Any) -> tuple[ConsoleSettings, list[Identity]]:
    """Settings whose every API client is ``api``; the identities it was asked for, in order."""
    seen: list[Identity] = []

    def factory(identity: Identity) -> KubeApi:
        seen.append(identity)
        return api

    settings = ConsoleSettings(
        identity=IdentitySettings(cluster=Connection(server="https://127.0.0.1:1")),
        default_namespace="user-a",
        clock=lambda: NOW,
        api_factory=factory,
        refresh=0.2,
        **kwargs,
    )
    return settings, seen


Client = TestClient[Any, Any]


async def signed_in(settings: ConsoleSettings) -> Client:
    client: Client = TestClient(TestServer(build_app(settings)))
    await client.start_server()
    answer = await client.post("/login", data={"token": TOKEN, "next": "/jobs"}, allow_redirects=False)
    assert answer.status == 303, await answer.text()
    return client


@pytest.fixture
async def world() -> AsyncIterator[tuple[Client, FakeApi, list[Identity]]]:
    api = seed_api()
    settings, seen = console(api)
    client = await signed_in(settings)
    try:
        yield client, api, seen
    finally:
        await client.close()


World = tuple[Client, FakeApi, list[Identity]]


def row(html: str, kind: str, name: str) -> str:
    found = re.search(rf'<tr id="job-{kind}-{name}".*?</tr>', html, re.S)
    assert found, f"no row for {kind}/{name} in the page"
    return found.group(0)


def cells(row_html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row_html, re.S)]


async def test_the_jobs_page_lists_status_queue_and_position(world: World) -> None:
    client, _, _ = world
    answer = await client.get("/jobs?namespace=user-a")
    assert answer.status == 200
    html = await answer.text()
    assert cells(row(html, "job", "pi1"))[:5] == ["pi1", "Job", "RUNNING", "Department-a", "-"]
    assert cells(row(html, "job", "pi2"))[:5] == ["pi2", "Job", "QUEUING", "Department-a", "2"]
    assert cells(row(html, "job", "done"))[2] == "SUCCEEDED"
    assert cells(row(html, "job", "broke"))[2] == "FAILED"
    assert "big" not in html  # user-b's job: another namespace


async def test_a_waiting_job_shows_exactly_what_kq_why_prints(world: World) -> None:
    client, _, _ = world
    answer = await client.get("/jobs/user-a/job/pi2")
    assert answer.status == 200
    html = await answer.text()
    why = re.search(r'<pre id="why" class="why">(.*?)</pre>', html, re.S)
    assert why is not None
    import html as html_lib  # noqa: PLC0415

    cli = run(["why", "pi2", "-n", "user-a"], seed_api(), width=100)
    assert cli.code == 0
    assert html_lib.unescape(why.group(1)).strip() == cli.out.strip()
    assert "position 2 of 2" in cli.out  # the same pass that gives the position gives the reason


async def test_a_job_that_does_not_exist_is_a_404_that_says_so(world: World) -> None:
    client, _, _ = world
    answer = await client.get("/jobs/user-a/job/pi3")
    assert answer.status == 404
    assert "job &#39;pi3&#39; not found in namespace user-a" in await answer.text()
    answer = await client.get("/jobs/user-a/cronjob/pi2")
    assert answer.status == 404
    assert "unknown kind" in await answer.text()


async def test_a_bad_namespace_is_a_400(world: World) -> None:
    client, _, _ = world
    answer = await client.get("/jobs?namespace=User_A")
    assert answer.status == 400
    assert "is not a namespace name" in await answer.text()


async def test_delete_removes_the_job_and_says_so(world: World) -> None:
    client, api, _ = world
    answer = await client.post("/jobs/user-a/job/pi2/delete", allow_redirects=False)
    assert answer.status == 303
    assert ("batch", "jobs", "user-a", "pi2") not in api.objects
    page = await client.get(answer.headers["Location"])
    html = await page.text()
    assert "Job pi2 deleted from namespace user-a" in html
    assert 'id="job-job-pi2"' not in html
    answer = await client.post("/jobs/user-a/job/pi2/delete", allow_redirects=False)
    assert answer.status == 404
    assert "not found" in await answer.text()


# Submit ---------------------------------------------------------------------------------------------------------

GOOD = {"kind": "job", "namespace": "user-a", "name": "pi3", "cpu": "10", "memory": "10Gi", "gpus": "0",
        "workers": "6", "image": "busybox:1.36", "command": "sleep 60"}


async def test_submit_shows_the_yaml_first_then_creates_it(world: World) -> None:
    client, api, _ = world
    answer = await client.post("/submit", data={**GOOD, "action": "preview"})
    assert answer.status == 200
    html = await answer.text()
    assert "parallelism: 6" in html and "name: pi3" in html and "- sleep 60" in html
    assert not api.created  # nothing is created by the preview
    answer = await client.post("/submit", data={**GOOD, "action": "create"}, allow_redirects=False)
    assert answer.status == 303
    [created] = api.created
    assert created["spec"]["parallelism"] == 6
    container = created["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "10", "memory": "10Gi"}
    assert container["command"] == ["sh", "-c", "sleep 60"]


async def test_submitting_a_name_taken_says_so(world: World) -> None:
    client, _, _ = world
    answer = await client.post("/submit", data={**GOOD, "name": "pi1", "action": "create"})
    assert answer.status == 409
    assert "Job pi1 already exists in namespace user-a" in await answer.text()


BAD_FIELDS = [
    ("kind", "cronjob", "Kind &#39;cronjob&#39; is not one the console submits"),
    ("namespace", "User_A", "is not a namespace name"),
    ("namespace", " ", "Namespace is required"),
    ("name", "Pi_3", "Name &#39;Pi_3&#39; is not a valid job name"),
    ("name", "pi 3", "Name &#39;pi 3&#39; cannot hold spaces"),
    ("name", "x" * 64, "is not a valid job name"),
    ("cpu", "ten", "CPU &#39;ten&#39; is not a quantity"),
    ("cpu", "0", "CPU must be more than 0"),
    ("memory", "10 GB", "Memory &#39;10 GB&#39; cannot hold spaces"),
    ("memory", "10Gb", "Memory &#39;10Gb&#39; is not a quantity"),
    ("gpus", "two", "GPUs must be a whole number, got &#39;two&#39;"),
    ("gpus", "-1", "GPUs must be at least 0, got -1"),
    ("gpus", "99999999999", "GPUs must be at most 2147483647"),
    ("workers", "0", "Workers must be at least 1, got 0"),
    ("workers", "1.5", "Workers must be a whole number"),
    ("image", "", "Image is required"),
    ("image", "busy box", "Image &#39;busy box&#39; cannot hold spaces"),
    ("command", "sleep\x0060", "Command holds control characters"),
    ("command", "x" * 5000, "Command is too long"),
]


@pytest.mark.parametrize(("field", "value", "message"), BAD_FIELDS)
@pytest.mark.parametrize("action", ["preview", "create"])
async def test_bad_input_in_every_submit_field_is_a_422_that_names_it(
    world: World, field: str, value: str, message: str, action: str
) -> None:
    client, api, _ = world
    answer = await client.post("/submit", data={**GOOD, field: value, "action": action})
    assert answer.status in (400, 422)
    html = await answer.text()
    assert message in html
    assert 'id="problem"' in html
    assert not api.created


async def test_a_form_posted_from_another_site_is_refused(world: World) -> None:
    client, api, _ = world
    answer = await client.post("/submit", data={**GOOD, "action": "create"}, headers={"Origin": "https://evil.test"})
    assert answer.status == 403
    assert not api.created


# Operators -------------------------------------------------------------------------------------------------------


async def test_the_operator_page_draws_the_tree_with_its_numbers(world: World) -> None:
    client, _, _ = world
    answer = await client.get("/operator")
    assert answer.status == 200
    html = await answer.text()
    rows = re.findall(r'<g class="quota-row" data-quota="([^"]+)" data-resource="([^"]+)"', html)
    assert ("root", "cpu") in rows and ("root/Department-a", "cpu") in rows and ("root/Department-b", "gpu") in rows
    a_cpu = re.search(
        r'data-quota="root/Department-a" data-resource="cpu".*?(?=<g class="quota-row"|</svg>)', html, re.S)
    assert a_cpu is not None
    # The seed's Department-a: min 60, max 100; pi1 uses 60 (within min); requested: pi1, pi2 (60) and user-b's
    # big (40). The same numbers as `kq top quota -o json`.
    assert "min 60 · max 100 · used 60 · borrowed 0 · requested 160" in a_cpu.group(0)
    top = json.loads(run(["top", "quota", "-o", "json"], seed_api()).out)
    department = next(q for q in top["quotas"] if q["quota"] == "root/Department-a")
    assert (department["min"]["cpu"], department["used"]["cpu"], department["request"]["cpu"]) == ("60", "60", "160")
    assert 'class="within"' in a_cpu.group(0) and 'class="minmark"' in a_cpu.group(0)
    queue_row = re.search(r'<tr id="queue-root-department-a-user-a">.*?</tr>', html, re.S)
    assert queue_row is not None
    assert cells(queue_row.group(0))[4] == "1"  # waiting
    assert "Admitted by quota root/Department-a" in html


async def test_the_operator_page_shows_each_fair_sharing_childs_share(world: World) -> None:
    client, api, _ = world
    quota_tree = api.objects[("scheduling.sigs.k8s.io", "elasticquotatrees", "kube-system", "elasticquotatree")]
    quota_tree["spec"]["root"]["attributes"] = {FAIR_SHARING_ATTRIBUTE: "true"}
    html = await (await client.get("/operator")).text()
    fairness = re.findall(r'<p class="fairness">(.*?)</p>', html)
    # Default weights are each child's largest share of root's min: Department-a 3 of 4 GPUs, Department-b
    # 40 of 100 CPU, so 0.75 : 0.40 of the spare. Department-b's mnist borrows GPUs beyond its min of 1.
    assert fairness == ["fair sharing under root: Department-a borrows at share 0.00, fair part of the spare 65%; "
                        "Department-b borrows at share 0.62, fair part of the spare 35%"]
    del quota_tree["spec"]["root"]["attributes"]
    assert 'class="fairness"' not in await (await client.get("/operator")).text()


async def test_the_operator_page_says_what_it_may_not_read(world: World) -> None:
    client, api, _ = world
    api.forbidden |= {("queues", "kube-queue"), ("events", None), ("jobs", None)}
    answer = await client.get("/operator")
    assert answer.status == 200
    html = await answer.text()
    assert "cannot list the Queues in kube-queue" in html and "403 Forbidden" in html
    assert "cannot list the controller&#39;s Events" in html


# Live -------------------------------------------------------------------------------------------------------------


async def next_event(lines: Any, wanted: Callable[[str, str], bool], timeout: float = 10.0) -> tuple[str, str]:
    """Read SSE events until one satisfies ``wanted(event, data)``."""

    async def read() -> tuple[str, str]:
        event, data = "message", []
        while True:
            raw = await lines.readline()
            if not raw:
                raise AssertionError("the stream ended")
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and (data or event != "message"):
                text = "\n".join(data)
                if wanted(event, text):
                    return event, text
                event, data = "message", []

    return await asyncio.wait_for(read(), timeout)


async def test_the_jobs_stream_pushes_a_change_without_a_reload(world: World) -> None:
    client, api, _ = world
    async with client.get("/events/jobs?namespace=user-a") as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        _, first = await next_event(stream.content, lambda e, d: e == "update")
        assert cells(row(first, "job", "pi2"))[2] == "QUEUING"
        # pi1 goes, pi2 is released and its pods run: the controller's and the kubelet's work, done by hand.
        del api.objects[("batch", "jobs", "user-a", "pi1")]
        pi2 = api.objects[("batch", "jobs", "user-a", "pi2")]
        pi2["spec"]["suspend"] = False
        for index in range(6):
            api.add(cluster_pod(f"pi2-{index}", namespace="user-a", owner=pi2))
        _, second = await next_event(stream.content, lambda e, d: e == "update")
        assert cells(row(second, "job", "pi2"))[2] == "RUNNING"
        assert 'id="job-job-pi1"' not in second


async def test_the_log_stream_follows_the_chief_pod(world: World) -> None:
    client, _, _ = world
    async with client.get("/events/logs/user-c/pytorchjob/mnist") as stream:
        assert await next_event(stream.content, lambda e, d: e == "status") == (
            "status", "following the log of pod mnist-master-0")
        assert await next_event(stream.content, lambda e, d: True) == ("line", "epoch 1 loss 0.9")
        assert await next_event(stream.content, lambda e, d: True) == ("line", "epoch 2 loss 0.5")
        event, _ = await next_event(stream.content, lambda e, d: True)
        assert event == "end"


async def test_the_log_stream_of_a_waiting_job_says_why_it_has_no_log_yet(world: World) -> None:
    client, _, _ = world
    async with client.get("/events/logs/user-a/job/pi2") as stream:
        assert await next_event(stream.content, lambda e, d: e == "status") == (
            "status", "waiting for pi2 to start: it is QUEUING at position 2")


async def test_a_log_the_api_cannot_read_is_explained(world: World) -> None:
    client, _, _ = world
    async with client.get("/events/logs/user-a/job/pi1") as stream:
        _, data = await next_event(stream.content, lambda e, d: e == "problem")
        assert "cannot read the logs of pod pi1-0" in data


async def test_the_job_stream_pushes_its_why(world: World) -> None:
    client, _, _ = world
    async with client.get("/events/job/user-a/job/pi2") as stream:
        _, first = await next_event(stream.content, lambda e, d: e == "update")
        assert 'data-status="QUEUING"' in first
        assert "is QUEUING: position 2 of 2 in quota root/Department-a" in " ".join(first.split())


async def test_a_stream_without_an_identity_is_a_401_not_a_redirect() -> None:
    settings, _ = console(seed_api())
    client: Client = TestClient(TestServer(build_app(settings)))
    await client.start_server()
    try:
        answer = await client.get("/events/jobs?namespace=user-a", allow_redirects=False)
        assert answer.status == 401
        assert "sign in" in await answer.text()
    finally:
        await client.close()


@pytest.fixture
async def loose() -> AsyncIterator[Client]:
    """The console over the seed's cluster with Deployment user-a/web (2 of 3 pods run, one waits for pod-level
    quota, reclaim took two) and webby (its pod waits for memory): ``tests/loose_world.py``."""
    api = loose_api()
    api.add({**api.get(Ref.of(kinds.DEPLOYMENT), "web", "user-a"), "status": {"readyReplicas": 2}})
    settings, _ = console(api)
    client = await signed_in(settings)
    try:
        yield client
    finally:
        await client.close()


async def test_the_jobs_page_lists_the_workloads_the_queue_does_not_hold(loose: Client) -> None:
    html = await (await loose.get("/jobs?namespace=user-a")).text()
    web = re.search(r'<tr id="workload-deployment-web">.*?</tr>', html, re.S)
    assert web is not None, html
    assert cells(web.group(0))[:3] == ["web", "Deployment", "2/3"]
    assert html.count("id=\"workload-deployment-web\"") == 1
    assert 'href="/workloads/user-a/deployment/web"' in web.group(0)
    assert "free" not in html  # default's Deployment: another namespace


async def test_a_deployments_page_shows_exactly_what_kq_why_prints(loose: Client) -> None:
    answer = await loose.get("/workloads/user-a/deployment/web")
    assert answer.status == 200
    why = re.search(r'<pre id="why" class="why">(.*?)</pre>', await answer.text(), re.S)
    assert why is not None
    import html as html_lib  # noqa: PLC0415

    cli = run(["why", "deployment/web", "-n", "user-a"], loose_api(), width=100)
    assert cli.code == 0, cli.err
    assert html_lib.unescape(why.group(1)).strip() == cli.out.strip()
    assert "web-5c7d9-ccccc" in cli.out and "Reclaim evicted 2 of its pods" in " ".join(cli.out.split())


async def test_a_jobs_pod_leads_to_its_jobs_page(loose: Client) -> None:
    answer = await loose.get("/workloads/user-a/pod/pi1-0", allow_redirects=False)
    assert answer.status == 303
    assert answer.headers["Location"] == "/jobs/user-a/job/pi1"


async def test_a_workload_that_does_not_exist_or_an_unknown_kind_is_a_404_that_says_so(loose: Client) -> None:
    missing = await loose.get("/workloads/user-a/deployment/nope")
    assert missing.status == 404
    assert "deployment &#39;nope&#39; not found in namespace user-a" in await missing.text()
    unknown = await loose.get("/workloads/user-a/cronjob/nope")
    assert unknown.status == 404
    assert "unknown kind" in await unknown.text()

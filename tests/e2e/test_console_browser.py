"""The web console in a real browser (Debian's Chromium driven by Playwright) against the dev cluster.

The module installs the seed's tree shape over namespaces of its own (Department-a: team_a and team_a2;
Department-b: team_b) and restarts the service with ``--oversellrate=1``, as the seed's scenario 1. A
developer - a ServiceAccount with ``edit`` in team_a only, plus kube-queue-quota-viewer
(manifests/console/rbac.yaml) - signs in with their token and:

* submits the seed's two jobs (6 pods x 10 CPU, 10Gi) from the form, seeing the YAML first;
* sees the second QUEUING at position 1, and on its page the reason ``kq why`` gives;
* deletes the first, and watches the second start on its open page (no reload), then follows its log;
* cannot see team_b's jobs.

The operator page (the dev console acting as the kubeconfig's admin) shows the tree with the seed's numbers.
Screenshots of each page go to artifacts/console/ (``KQ_CONSOLE_DOCS=1`` also copies them to docs/console/).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, unique, wait_managed
from tests.e2e.setups import developer_tree_spec
from webhook.cli import devsystem

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "console"
DOCS = ROOT / "docs" / "console"
DEVELOPER = "console-dev"
LIVE = 120_000
"""Milliseconds a live update may take (a job starting: controller pass, scheduler, kwok)."""


def chromium() -> str:
    """The system Chromium (hack/system-deps.sh installs it); skipped locally without it, never in CI."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: run `make deps` (hack/system-deps.sh)")
        pytest.skip("chromium is not installed (hack/system-deps.sh installs it; CI runs this test)")
    return found


@dataclass
class Console:
    dev: DevCluster
    url: str
    team_a: str
    team_a2: str
    team_b: str
    token: str
    browser: Any


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("KQ_CONSOLE_DOCS"):
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS / f"{name}.png")


@pytest.fixture(scope="module")
def console(dev_cluster: DevCluster) -> Iterator[Console]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    executable = chromium()
    dev = dev_cluster
    names = (unique("web-a"), unique("web-a2"), unique("web-b"))
    dev.restart_service("--oversellrate=1", "--status-interval=1")
    try:
        create_namespaces(dev, *names)
        dev.kubectl("apply", "-f", str(ROOT / "manifests" / "console" / "rbac.yaml"))
        team_a = names[0]
        dev.kubectl("create", "serviceaccount", DEVELOPER, "-n", team_a)
        dev.kubectl("create", "rolebinding", f"{DEVELOPER}-edit", "--clusterrole=edit",
                    f"--serviceaccount={team_a}:{DEVELOPER}", "-n", team_a)
        dev.kubectl("create", "clusterrolebinding", f"{team_a}-quota-viewer", "--clusterrole=kube-queue-quota-viewer",
                    f"--serviceaccount={team_a}:{DEVELOPER}")
        token = dev.kubectl("create", "token", DEVELOPER, "-n", team_a, "--duration=1h").strip()
        with installed_tree(dev, developer_tree_spec(*names)), sync_playwright() as playwright:
            wait_managed(dev, *names)
            browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"], headless=True)
            try:
                yield Console(dev, devsystem.console_url(dev.config), *names, token=token, browser=browser)
            finally:
                browser.close()
                for namespace in names:
                    dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        dev.kubectl("delete", "clusterrolebinding", f"{names[0]}-quota-viewer", "--ignore-not-found", check=False)
        for namespace in names:
            dev.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")
        dev.restart_service()


@pytest.fixture(scope="module")
def developer(console: Console) -> Iterator[Any]:
    """A browser session signed in with the developer's token."""
    context = console.browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{console.url}login?next=/jobs?namespace={console.team_a}")
    shot(page, "login")
    page.fill("textarea[name=token]", console.token)
    page.click("#login button[type=submit]")
    page.wait_for_url(f"**/jobs?namespace={console.team_a}")
    try:
        yield page
    finally:
        context.close()


def submit_seed_job(page: Any, console: Console, name: str) -> None:
    page.goto(f"{console.url}submit?namespace={console.team_a}")
    page.fill("input[name=name]", name)
    page.fill("input[name=cpu]", "10")
    page.fill("input[name=memory]", "10Gi")
    page.fill("input[name=workers]", "6")
    page.fill("input[name=command]", "sleep 1d")
    page.click("#preview")
    yaml_text = page.inner_text("#yaml")
    assert "parallelism: 6" in yaml_text and "cpu: '10'" in yaml_text and f"name: {name}" in yaml_text
    if name == "pi1":
        shot(page, "submit")
    page.click("#create")
    page.wait_for_url(f"**/jobs?namespace={console.team_a}*")
    assert f"Job {name} created in namespace {console.team_a}" in page.inner_text("#notice")


def test_a_developer_submits_the_seeds_two_jobs_and_the_second_queues_at_position_1(
    console: Console, developer: Any
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415

    page = developer
    assert "system:serviceaccount:" in page.inner_text("#who")
    submit_seed_job(page, console, "pi1")
    expect(page.locator("#job-job-pi1")).to_have_attribute("data-status", "RUNNING", timeout=LIVE)
    submit_seed_job(page, console, "pi2")
    expect(page.locator("#job-job-pi2")).to_have_attribute("data-status", "QUEUING", timeout=LIVE)
    expect(page.locator("#job-job-pi2 .position")).to_have_text("1", timeout=LIVE)
    shot(page, "jobs")


def test_the_waiting_job_says_why_then_starts_live_when_the_first_goes_and_its_log_follows(
    console: Console, developer: Any
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415

    page = developer
    page.goto(f"{console.url}jobs/{console.team_a}/job/pi2")
    expect(page.locator("#status")).to_have_text("QUEUING")
    why = " ".join(page.inner_text("#why").split())
    assert f"Job {console.team_a}/pi2 is QUEUING: position 1 of 1 in quota root/Department-a" in why
    assert "root/Department-a cpu 60 60 100 100 20" in why  # request, used, limit, max, short
    assert "Reclaim cannot help" in why
    expect(page.locator("#log-status")).to_contain_text("waiting for pi2 to start: it is QUEUING at position 1")
    shot(page, "job-queuing")
    page.evaluate("window.kqNotReloaded = true")

    other = page.context.new_page()
    other.on("dialog", lambda dialog: dialog.accept())
    other.goto(f"{console.url}jobs?namespace={console.team_a}")
    # The live stream's first update replaces the table it was loaded with; a click that lands while the row
    # is swapped hits the old, detached button and submits nothing. Click once the first update is in.
    expect(other.locator("#jobs")).to_have_attribute("data-updates", re.compile(r"^[1-9]"), timeout=LIVE)
    other.click("#job-job-pi1 button[name=delete]")
    other.wait_for_url("**/jobs?namespace=*notice=*")
    assert "pi1 deleted" in other.inner_text("#notice")
    other.close()

    expect(page.locator("#status")).to_have_text("RUNNING", timeout=LIVE)
    assert page.evaluate("window.kqNotReloaded") is True  # pushed to the page, not reloaded
    expect(page.locator("#log-status")).to_contain_text("following the log of pod pi2-", timeout=LIVE)
    expect(page.locator("#log")).not_to_be_empty(timeout=30_000)
    first = page.inner_text("#log").count("\n")
    # kwok's generated log gains a line every 2 s: the page follows it.
    page.wait_for_function(f"document.getElementById('log').textContent.split('\\n').length > {first + 2}",
                           timeout=30_000)
    shot(page, "job-running")


def test_a_developer_with_rights_in_one_namespace_cannot_see_anothers_jobs(
    console: Console, developer: Any
) -> None:
    dev = console.dev
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "secret-plan", "namespace": console.team_b},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": "1"},
                                                                       "limits": {"cpu": "1"}}}]}}}}
    dev.apply(job)
    page = developer
    answer = page.goto(f"{console.url}jobs?namespace={console.team_b}")
    assert answer is not None and answer.status == 403
    problem = page.inner_text("#problem")
    assert f"cannot list jobs in namespace {console.team_b}" in problem and "forbidden" in problem
    assert "secret-plan" not in page.content()
    answer = page.goto(f"{console.url}jobs/{console.team_b}/job/secret-plan")
    assert answer is not None and answer.status == 403
    assert f"cannot list jobs in namespace {console.team_b}" in page.inner_text("#problem")
    shot(page, "forbidden")


def test_the_operator_page_shows_the_tree_with_the_seeds_numbers(console: Console) -> None:
    context = console.browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        answer = page.goto(f"{console.url}operator")
        assert answer is not None and answer.status == 200
        rows = {
            (row.get_attribute("data-quota"), row.get_attribute("data-resource")):
                row.locator(".numbers").text_content() or ""
            for row in page.locator("#quota-tree .quota-row").all()
        }
        assert rows[("root", "cpu")].startswith("min 100 · max 100")
        assert rows[("root/Department-a", "cpu")].startswith("min 60 · max 100")
        assert rows[("root/Department-a", "memory")].startswith("min 60Gi · max 100Gi")
        assert rows[("root/Department-a", "gpu")].startswith("min 3 · max 4")
        assert rows[("root/Department-b", "cpu")].startswith("min 40 · max 100")
        assert rows[("root/Department-b", "gpu")].startswith("min 1 · max 4")
        # pi2 runs alone in Department-a now: 60 CPU used, all within its min.
        assert "used 60 · borrowed 0" in rows[("root/Department-a", "cpu")]
        queue = page.locator(f"#queue-root-department-a-{console.team_a}")
        assert queue.count() == 1
        assert "Admitted" in page.inner_text("#decisions")
        shot(page, "operator")
    finally:
        context.close()

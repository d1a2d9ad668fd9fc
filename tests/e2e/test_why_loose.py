"""``kq why`` for a Deployment, whose pods the queue does not hold (docs/pod-quota.md), on the dev cluster, run
by a namespace user with ``edit`` through a kubeconfig of their own.

The tree: root 100 CPU; Serve (min 40: alice's namespace) and Batch (min 60: carol's). Alice's Deployment of
six 10-CPU pods borrows 20 CPU while Batch is idle. Carol's Job of six 10-CPU pods takes Batch's min back:
reclaim evicts two of alice's pods, and the Deployment's replacements wait, refused by the extender: the root
is full. ``kq why deployment/web`` names Serve, the two waiting pods with the extender's words, and the two pods
reclaim took; ``kq why pod/NAME`` of one that was taken says it is gone and why. The console, signed in with the
same user's token, lists the Deployment and shows the same answer, and refuses carol's namespace.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import preemption_support as pre
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import edit_kubeconfig, kq_as, wait_running
from webhook.cli import devsystem

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _console(dev: DevCluster, token: str, namespace: str) -> Callable[[str], tuple[int, str]]:
    """GET a page of the dev cluster's console, signed in with ``token`` (then shown ``namespace``'s jobs): its
    status and text."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    url = devsystem.console_url(dev.config)
    form = {"token": token, "next": f"/jobs?namespace={namespace}"}
    opener.open(f"{url}login", data=urllib.parse.urlencode(form).encode(), timeout=60)

    def get(path: str) -> tuple[int, str]:
        try:
            with opener.open(f"{url}{path}", timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    return get


@pytest.fixture(scope="module")
def spaces(dev_cluster: DevCluster) -> Iterator[pre.Spaces]:
    with pre.serve_and_batch(dev_cluster, "why", serve_min=40, batch_min=60) as names:
        yield names


def test_kq_why_explains_a_deployment_whose_pods_reclaim_took(dev_cluster: DevCluster, spaces: pre.Spaces) -> None:
    dev = dev_cluster
    kubeconfig = edit_kubeconfig(dev, spaces.serve, "dev")

    def kq(*args: str) -> subprocess.CompletedProcess[str]:
        return kq_as(kubeconfig, *args, "-n", spaces.serve)

    pre.create(dev, spaces.serve, pre.deployment("web", 6, 10), "alice")
    wait_running(dev, spaces.serve, "app=web", 6)
    pre.create(dev, spaces.batch, pre.job("train", 6, 10), "carol")
    wait_running(dev, spaces.batch, "batch.kubernetes.io/job-name=train", 6)

    answer: dict[str, Any] = {}

    def explained() -> bool:
        result = kq("why", "deployment/web", "-o", "json")
        assert result.returncode == 0, result.stderr
        answer.clear()
        answer.update(json.loads(result.stdout))
        waiting = answer.get("podsWaiting", [])
        return len(answer.get("reclaimed", [])) == 2 and sum(entry["pods"] for entry in waiting) == 2 and all(
            entry["reason"] == "pod-quota" for entry in waiting)

    dev.wait_until(explained, 90, "kq why deployment/web naming two reclaimed pods and two waiting for room")
    assert answer["kind"] == "Deployment" and answer["queued"] is False
    # With edit alone the tree is not readable: the quota's label, and the role that shows its figures.
    assert "quota" not in answer
    flat = " ".join(answer["explanation"].split())
    assert "Its pods carry the label of quota Serve." in flat and "kube-queue-quota-viewer" in flat, flat

    dev.kubectl("apply", "-f", str(ROOT / "manifests" / "console" / "rbac.yaml"))
    dev.kubectl("create", "clusterrolebinding", f"{spaces.serve}-viewer", "--clusterrole=kube-queue-quota-viewer",
                f"--serviceaccount={spaces.serve}:dev")
    try:
        dev.wait_until(lambda: explained() and "quota" in answer, 30, "the quota once the tree is readable")
    finally:
        dev.kubectl("delete", "clusterrolebinding", f"{spaces.serve}-viewer", "--ignore-not-found", check=False)
    assert answer["quota"] == "root/Serve"
    assert "Quota root/Serve: cpu used" in " ".join(answer["explanation"].split())
    assert (answer["running"], answer["expected"]) == (4, 6)
    for entry in answer["podsWaiting"]:
        assert "pod-level quota" in entry["message"] and "quota root:" in entry["message"], entry
    reclaimed = answer["reclaimed"]
    assert all("Evicted by reclaim" in entry["message"] for entry in reclaimed), reclaimed
    assert all(entry["pod"].startswith("web-") for entry in reclaimed), reclaimed

    text = kq("why", "web")
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert flat.startswith(f"Deployment {spaces.serve}/web: 4 of 6 pods run.")
    assert "Reclaim evicted 2 of its pods:" in flat

    # The console says it too, to the same user signed in with a token of theirs.
    console = _console(dev, dev.kubectl("create", "token", "dev", "-n", spaces.serve).strip(), spaces.serve)
    status, page = console(f"workloads/{spaces.serve}/deployment/web")
    why = re.search(r'<pre id="why" class="why">(.*?)</pre>', page, re.S)
    assert status == 200 and why is not None, page
    shown = " ".join(html.unescape(why.group(1)).split())
    assert shown.startswith(f"Deployment {spaces.serve}/web: 4 of 6 pods run.") and "Reclaim evicted 2" in shown, shown
    status, page = console(f"jobs?namespace={spaces.serve}")
    assert status == 200 and f'href="/workloads/{spaces.serve}/deployment/web"' in page, page
    status, page = console(f"workloads/{spaces.batch}/deployment/web")
    assert status == 403, page

    gone = kq("why", f"pod/{reclaimed[0]['pod']}")
    assert gone.returncode == 0, gone.stderr
    assert " ".join(gone.stdout.split()).startswith(f"Pod {spaces.serve}/{reclaimed[0]['pod']} is gone.")
    assert "Reclaim evicted it:" in gone.stdout

    # The user's own namespace only: carol's is refused, as kubectl refuses it.
    other = kq_as(kubeconfig, "why", "job/train", "-n", spaces.batch)
    assert other.returncode != 0 and "forbidden" in other.stderr.lower(), other

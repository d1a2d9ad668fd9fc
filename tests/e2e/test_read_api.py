"""``kq serve``'s read API on the dev cluster (docs/queueing.md, "Reading every job"; docs/security.md, "The
controller's read API"): ``kq list -A`` reads the controller's job summaries through the API server's aggregator
and they say what the API says; a user sees the summaries of the namespaces RBAC lets them list and no
other; nobody reaches the summaries around the API server; a hung ``kq serve`` costs ``kq list -A`` a bounded
wait, then the API is read. ``kq why`` takes the controller's answer for a waiting job (docs/queueing.md, "Why a
job waits, from the controller"), and it says what ``kq`` computes from every job."""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, edit_kubeconfig, installed_tree, kq_as, unique, wait_managed
from tests.e2e.setups import developer_tree_spec
from webhook.devcluster import processes
from webhook.readmodel.served import summaries_path

pytestmark = pytest.mark.e2e

USER = "alice"
COMPARED = ("name", "namespace", "kind", "status", "quota", "queue", "leaf", "position", "priority", "pods",
            "request", "created", "admittedAt")
"""What the two reads must agree on (a start estimate may be refreshed between them)."""


@dataclass
class Teams:
    dev: DevCluster
    a: str
    b: str

    def kq(self, *args: str) -> subprocess.CompletedProcess[str]:
        cut = args.index("--") if "--" in args else len(args)
        argv = [sys.executable, "-m", "webhook.cli.main", *args[:cut], f"--kubeconfig={self.dev.config.kubeconfig}",
                *args[cut:]]
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)

    def listed(self, *flags: str) -> dict[tuple[str, str], dict[str, Any]]:
        result = self.kq("list", "-A", "-o", "json", *flags)
        assert result.returncode == 0, result.stderr
        return {(job["namespace"], job["name"]): {key: job.get(key) for key in COMPARED}
                for job in json.loads(result.stdout)["items"] if job["namespace"] in (self.a, self.b)}

    def served_lines(self) -> int:
        log = self.dev.config.logs / "kq-serve.log"
        return sum("component=read-api event=listed" in line for line in log.read_text(errors="replace").splitlines())


@pytest.fixture(scope="module")
def teams(dev_cluster: DevCluster) -> Iterator[Teams]:
    dev = dev_cluster
    a, a2, b = unique("read-a"), unique("read-a2"), unique("read-b")
    try:
        create_namespaces(dev, a, a2, b)
        dev.kubectl("create", "rolebinding", "alice-edit", "-n", a, "--clusterrole=edit", f"--user={USER}")
        with installed_tree(dev, developer_tree_spec(a, a2, b)):
            wait_managed(dev, a, a2, b)
            teams = Teams(dev, a, b)
            # 100 CPUs each: the quota's max (at any oversell rate) leaves some of team a's waiting.
            for name, namespace in (("pi1", a), ("pi2", a), ("pi3", a), ("pi4", a), ("pb", b)):
                submitted = teams.kq("submit", "job", "-n", namespace, "--name", name, "--cpu", "10", "--memory",
                                     "10Gi", "--workers", "10", "--", "sleep", "600")
                assert submitted.returncode == 0, submitted.stderr
            dev.wait_until(lambda: any(job["status"] == "QUEUING" and job["position"] == 1
                                       for job in teams.listed("--direct").values()), 120, "a job of team a queued")
            yield teams
            for namespace in (a, b):
                dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        for namespace in (a, a2, b):
            dev.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")


def test_every_namespace_is_read_from_the_controller_and_says_what_the_api_says(teams: Teams) -> None:
    before = teams.served_lines()
    served, direct = teams.listed(), teams.listed("--direct")
    if served != direct:  # a pod's phase may have moved between the two reads: once more
        served, direct = teams.listed(), teams.listed("--direct")
    assert served == direct
    assert {key[1] for key in served} == {"pi1", "pi2", "pi3", "pi4", "pb"}
    assert any(job["status"] == "QUEUING" for job in served.values())
    assert teams.served_lines() >= before + 1, "kq list -A did not read the controller's summaries"
    # kubectl reads the same API.
    raw = json.loads(teams.dev.kubectl("get", "--raw", summaries_path(teams.a)))
    assert {item["job"]["name"] for item in raw["items"]} == {"pi1", "pi2", "pi3", "pi4"}
    assert raw["kind"] == "JobSummaryList"
    assert all(item["metadata"]["namespace"] == teams.a for item in raw["items"])
    # kubectl's own listing fills in each item's kind from the list's.
    table = teams.dev.kubectl("get", "jobsummaries.visibility.kube-queue.x-k8s.io", "-n", teams.a, "-o", "name")
    assert sorted(table.split()) == [f"jobsummary.visibility.kube-queue.x-k8s.io/{name}"
                                     for name in ("pi1", "pi2", "pi3", "pi4")]


def test_a_user_lists_the_summaries_of_their_namespace_and_no_other(teams: Teams) -> None:
    dev = teams.dev
    own = dev.kubectl_result("get", "--raw", summaries_path(teams.a), user=USER)
    assert own.returncode == 0, own.stderr
    assert {item["job"]["namespace"] for item in json.loads(own.stdout)["items"]} == {teams.a}
    for path in (summaries_path(teams.b), summaries_path(None)):
        refused = dev.kubectl_result("get", "--raw", path, user=USER)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused
    # Through kq, as a ServiceAccount with the same role: every namespace is refused (the summaries, then the
    # Jobs), its own namespace is listed.
    kubeconfig = edit_kubeconfig(dev, teams.a, "reader")

    def kq_as_reader(*args: str) -> subprocess.CompletedProcess[str]:
        return kq_as(kubeconfig, *args)

    everything = kq_as_reader("list", "-A")
    assert everything.returncode != 0 and teams.b not in everything.stdout, everything
    assert "forbidden" in everything.stderr.lower() or "cannot list" in everything.stderr, everything.stderr
    own = kq_as_reader("list", "-n", teams.a)
    assert own.returncode == 0 and "pi4" in own.stdout, own


def _direct(port: int, headers: dict[str, str], cert: tuple[str, str] | None) -> int:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(*cert)
    request = urllib.request.Request(f"https://127.0.0.1:{port}{summaries_path(None)}", headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_nobody_reaches_the_summaries_around_the_api_server(teams: Teams) -> None:
    port, pki = teams.dev.config.ports.webhook, teams.dev.config.pki
    admin = {"X-Remote-User": "kube-admin", "X-Remote-Group": "system:masters"}
    assert _direct(port, admin, None) == 401
    # The cluster admin's own client certificate (the cluster CA's, not the front proxy's): no handshake.
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        _direct(port, admin, (str(pki / "admin.crt"), str(pki / "admin.key")))


def test_a_hung_service_costs_kq_list_a_bounded_wait_then_the_api_is_read(teams: Teams) -> None:
    dev = teams.dev
    pid = processes.running_pid(dev.config.run, "kq-serve", str(dev.config.state_dir))
    assert pid is not None, "kq serve of the test cluster is not running"
    expected = teams.listed("--direct")
    os.kill(pid, signal.SIGSTOP)
    try:
        result = teams.kq("list", "-A", "-o", "json")
    finally:
        os.kill(pid, signal.SIGCONT)
    assert result.returncode == 0, result.stderr
    assert "reading every job from the API server instead" in result.stderr
    listed = {(job["namespace"], job["name"]): {key: job.get(key) for key in COMPARED}
              for job in json.loads(result.stdout)["items"] if job["namespace"] in (teams.a, teams.b)}
    assert listed.keys() == expected.keys()
    dev.wait_until(lambda: teams.kq("list", "-A").stderr == "", 60, "kq list -A served again once kq serve runs")


SUMMARIES = "jobsummaries.visibility.kube-queue.x-k8s.io"
SAME = ("NAMESPACE", "NAME", "KIND", "STATUS", "POSITION", "PODS")
"""The columns two reads of the table must agree on (an estimate and an age move between them, and a long queue
name may be cut to fit)."""


def _table(text: str, namespaces: tuple[str, ...], columns: tuple[str, ...] = SAME) -> dict[tuple[str, str], list[str]]:
    """The rows of a printed table in ``namespaces``, by namespace and name, with the cells of ``columns``."""
    lines = text.splitlines()
    header = lines[0].split()
    at = [header.index(column) for column in columns]
    rows = [re.split(r" {2,}", line.strip()) for line in lines[1:]]
    return {(cells[0], cells[1]): [cells[index] for index in at] for cells in rows if cells[0] in namespaces}


def test_kubectl_get_and_kq_list_read_the_summaries_as_a_table(teams: Teams) -> None:
    dev, log = teams.dev, teams.dev.config.logs / "kq-serve.log"

    def tables() -> int:
        return sum("event=listed" in line and "table=Metadata" in line
                   for line in log.read_text(errors="replace").splitlines())

    def both() -> tuple[dict[tuple[str, str], list[str]], dict[tuple[str, str], list[str]]]:
        served, direct = teams.kq("list", "-A", "-o", "wide"), teams.kq("list", "-A", "-o", "wide", "--direct")
        assert served.returncode == 0 and served.stderr == "", served.stderr
        return _table(served.stdout, (teams.a, teams.b)), _table(direct.stdout, (teams.a, teams.b))

    before = tables()
    served, direct = both()
    if served != direct:  # a pod's phase may have moved between the two reads: once more
        served, direct = both()
    assert served == direct and {name for _, name in served} == {"pi1", "pi2", "pi3", "pi4", "pb"}
    assert tables() >= before + 1, "kq list -A did not read the controller's table"
    # kubectl get prints the same columns from the same rows, the namespace from each row's object.
    printed = dev.kubectl("get", SUMMARIES, "-A")
    assert printed.splitlines()[0].split() == ["NAMESPACE", "NAME", "KIND", "STATUS", "QUEUE", "POSITION", "ETA",
                                               "AGE"]
    by_kubectl = _table(printed, (teams.a, teams.b), SAME[:5])
    assert by_kubectl.keys() == served.keys()
    assert all(cells == served[key][:5] for key, cells in by_kubectl.items()), (by_kubectl, served)
    wide = dev.kubectl("get", SUMMARIES, "-n", teams.a, "-o", "wide").splitlines()
    assert wide[0].split() == ["NAME", "KIND", "STATUS", "QUEUE", "POSITION", "ETA", "PRIORITY", "PODS", "REQUEST",
                               "AGE"]
    assert sorted(line.split()[0] for line in wide[1:]) == ["pi1", "pi2", "pi3", "pi4"]
    one = dev.kubectl("get", SUMMARIES, "pi1", "-n", teams.a).splitlines()
    assert len(one) == 2 and one[1].split()[:3] == ["pi1", "Job", served[(teams.a, "pi1")][3]]
    # The user with edit in team a's namespace gets its table, and no other namespace's.
    own = dev.kubectl_result("get", SUMMARIES, "-n", teams.a, user=USER)
    assert own.returncode == 0 and "pi4" in own.stdout, own
    for where in (["-n", teams.b], ["-A"]):
        refused = dev.kubectl_result("get", SUMMARIES, *where, user=USER)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused


WHY_COMPARED = ("kind", "namespace", "name", "status", "quota", "queue", "position", "waiting", "policy",
                "oversellRate", "fitsNow", "byReclaim", "blockers", "ahead")
"""What the controller's answer and ``kq``'s own must agree on (the start estimate rests on other figures)."""


def test_kq_why_takes_the_controllers_answer_which_says_what_kq_computes(teams: Teams) -> None:
    dev = teams.dev
    queued = sorted(name for (namespace, name), job in teams.listed("--direct").items()
                    if namespace == teams.a and job["status"] == "QUEUING")
    assert queued, "a job of team a waits"
    name = queued[-1]
    log = dev.config.logs / "kq-serve.log"

    def explained() -> int:
        return sum("event=explained" in line and f"name={name}" in line and "unexplained=-" in line
                   for line in log.read_text(errors="replace").splitlines())

    def both() -> tuple[dict[str, Any], dict[str, Any]]:
        served = teams.kq("why", "-n", teams.a, name, "-o", "json")
        direct = teams.kq("why", "-n", teams.a, name, "-o", "json", "--direct")
        assert served.returncode == 0 and served.stderr == "", served.stderr
        assert direct.returncode == 0, direct.stderr
        return ({key: json.loads(served.stdout).get(key) for key in WHY_COMPARED},
                {key: json.loads(direct.stdout).get(key) for key in WHY_COMPARED})

    before = explained()
    served, direct = both()
    if served != direct:  # a pass may have run between the two reads: once more
        served, direct = both()
    assert served == direct
    assert served["status"] == "QUEUING" and served["position"] is not None
    assert explained() >= before + 1, "kq why did not take the controller's answer"
    # The user with edit in team a's namespace gets its jobs' answers, and no other namespace's.
    own = dev.kubectl_result("get", "--raw", f"{summaries_path(teams.a)}/{name}", user=USER)
    assert own.returncode == 0 and json.loads(own.stdout)["why"]["name"] == name, own
    other = dev.kubectl_result("get", "--raw", f"{summaries_path(teams.b)}/pb", user=USER)
    assert other.returncode != 0 and "forbidden" in other.stderr.lower(), other

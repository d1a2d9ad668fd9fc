"""Monitoring on the dev cluster: the metrics carry the right values after a scenario, the Grafana dashboard
and the alert rules use only metric names the system really exports, and a real Prometheus (Debian's
package, installed by ``make deps``) scrapes the service and the extender and loads the alert rules."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import SEED_TREE_SPEC, job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, samples, scrape, unique, wait_managed

pytestmark = pytest.mark.e2e

MONITORING = Path(__file__).resolve().parents[2] / "manifests" / "monitoring"
NAME = re.compile(r"\b(kube_queue_[a-z_]+)\b")


def _exported_names(*texts: str) -> set[str]:
    """Every series name a query may use: gauges as is, counters with _total, histograms' _bucket/_sum/_count
    (declared families count even before their first sample)."""
    names: set[str] = set()
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.type == "counter":
                names.add(f"{family.name}_total")
            elif family.type == "histogram":
                names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
            else:
                names.add(family.name)
            names.update(sample.name for sample in family.samples)
    return names


@pytest.fixture(scope="module")
def scenario(dev_cluster: DevCluster) -> Iterator[str]:
    """A seed-shaped tree whose leaves have unique names (so the counters are this module's alone): one job
    of 10 CPU admitted, one of 210 CPU waiting (above max x 2, whatever the oversell rate). Yields the leaf's
    full quota name."""
    leaf = unique("Mon")
    ns_a, ns_b = unique("mon-a"), unique("mon-b")
    create_namespaces(dev_cluster, ns_a, ns_b)
    spec = copy.deepcopy(SEED_TREE_SPEC)
    spec["root"]["children"][0].update(name=leaf, namespaces=[ns_a])
    spec["root"]["children"][1].update(name=f"{leaf}-b", namespaces=[ns_b])
    try:
        with installed_tree(dev_cluster, spec):
            wait_managed(dev_cluster, ns_a, ns_b)
            dev_cluster.apply(job_manifest("small", namespace=ns_a, pods=1, cpu=10, memory="1Gi", container="c",
                                           grace_seconds=None))
            dev_cluster.apply(job_manifest("huge", namespace=ns_a, pods=21, cpu=10, memory="1Gi", container="c",
                                           grace_seconds=None))
            dev_cluster.wait_until(
                lambda: dev_cluster.get_json("job", "small", "-n", ns_a)["spec"].get("suspend") is False,
                60,
                "the small job admitted",
            )
            yield f"root/{leaf}"
    finally:
        for ns in (ns_a, ns_b):
            dev_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_metrics_carry_the_scenarios_values(dev_cluster: DevCluster, scenario: str) -> None:
    port = dev_cluster.config.ports.metrics
    quota = scenario

    def value(name: str, **labels: str) -> float | None:
        return samples(scrape(port)).get((name, frozenset(labels.items())))

    dev_cluster.wait_until(lambda: value("kube_queue_pending_jobs", quota=quota) == 1.0, 60, "pending gauge")
    assert value("kube_queue_admissions_total", quota=quota) == 1.0
    assert value("kube_queue_quota_used", quota=quota, resource="cpu") == 10.0
    assert value("kube_queue_quota_min", quota=quota, resource="cpu") == 60.0
    assert value("kube_queue_quota_max", quota=quota, resource="cpu") == 100.0
    assert value("kube_queue_quota_borrowed", quota=quota, resource="cpu") == 0.0
    assert value("kube_queue_quota_request", quota=quota, resource="cpu") == 220.0
    assert value("kube_queue_quota_used", quota=quota, resource="kube-queue/max-jobs") == 1.0
    assert value("kube_queue_controller_leader") == 1.0
    assert value("kube_queue_wait_seconds_count", quota=quota) == 1.0
    oldest = value("kube_queue_oldest_pending_seconds", quota=quota)
    assert oldest is not None
    assert oldest >= 0
    scraped = samples(scrape(port))
    patched = sum(v for (n, labels), v in scraped.items() if n == "kube_queue_webhook_requests_total"
                  and ("decision", "patched") in labels)
    assert patched >= 2  # both jobs were held and tagged by the webhook


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def _rule_groups() -> dict[str, Any]:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return {"groups": rule["spec"]["groups"]}


def _rule_count() -> int:
    return sum(len(group["rules"]) for group in _rule_groups()["groups"])


def test_the_dashboard_and_alerts_use_only_exported_metric_names(dev_cluster: DevCluster, scenario: str) -> None:
    exported = _exported_names(scrape(dev_cluster.config.ports.metrics), scrape(dev_cluster.config.ports.extender))
    used = {m for expr in _dashboard_exprs() for m in NAME.findall(expr)}
    used |= {m for group in _rule_groups()["groups"] for r in group["rules"] for m in NAME.findall(r["expr"])}
    assert used  # the check reads real queries
    assert sorted(used - exported) == []


def _prometheus_get(port: int, path: str, **params: str) -> Any:
    query = urllib.parse.urlencode(params)
    url = f"http://127.0.0.1:{port}{path}" + (f"?{query}" if query else "")
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:  # Prometheus says why in the body (a bad query...)
        raise AssertionError(f"{path} {params}: {error.code} {error.read().decode()}") from None


@pytest.fixture(scope="module")
def prometheus(dev_cluster: DevCluster, scenario: str) -> Iterator[int]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed: run `make deps` (Debian package prometheus)"
    work = Path(tempfile.mkdtemp(prefix="kq-prometheus-"))
    (work / "rules.yaml").write_text(yaml.safe_dump(_rule_groups()))
    ports = dev_cluster.config.ports
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(work / "rules.yaml")],
        "scrape_configs": [
            {"job_name": "kube-queue", "static_configs": [{"targets": [f"127.0.0.1:{ports.metrics}"]}]},
            {"job_name": "kube-queue-extender", "static_configs": [{"targets": [f"127.0.0.1:{ports.extender}"]}]},
        ],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = ports.base + 90
    log = (work / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        dev_cluster.wait_until(lambda: _ready(port), 60, "Prometheus ready")
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_promtool_accepts_the_alert_rules(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run `make deps` (Debian package prometheus)"
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(_rule_groups()))
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {_rule_count()} rules found" in result.stdout
    assert _rule_count() >= 7  # the file's rules are read, not an empty list


def test_a_real_prometheus_scrapes_the_system_and_evaluates_rules_and_dashboard(
    dev_cluster: DevCluster, scenario: str, prometheus: int
) -> None:
    seen: list[Any] = []

    def targets_up() -> bool:
        active = _prometheus_get(prometheus, "/api/v1/targets")["data"]["activeTargets"]
        seen[:] = [(t["scrapeUrl"], t["health"], t.get("lastError")) for t in active]
        return len(active) == 2 and all(t["health"] == "up" for t in active)

    try:
        dev_cluster.wait_until(targets_up, 60, "both targets up")
    except AssertionError as error:
        raise AssertionError(f"{error}; targets: {seen}") from None

    def rules_evaluated() -> bool:
        groups = _prometheus_get(prometheus, "/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return len(rules) == _rule_count() and all(r["health"] == "ok" for r in rules)

    dev_cluster.wait_until(rules_evaluated, 60, "every alert rule loaded and evaluated without error")

    def pending() -> list[Any]:
        query = f'kube_queue_pending_jobs{{quota="{scenario}"}}'
        result: list[Any] = _prometheus_get(prometheus, "/api/v1/query", query=query)["data"]["result"]
        return result

    dev_cluster.wait_until(lambda: bool(pending()), 60, "the pending gauge in Prometheus")
    assert float(pending()[0]["value"][1]) == 1.0
    # Every dashboard query runs (no parse error, no unknown function) with its variables filled in.
    for expr in _dashboard_exprs():
        # Quota names hold letters, digits, "-" and "/": literal in a PromQL regex as they stand.
        query = expr.replace("$quota", scenario).replace("$resource", "cpu")
        answer = _prometheus_get(prometheus, "/api/v1/query", query=query, time=str(time.time()))
        assert answer["status"] == "success", expr
    query = f'max by (quota) (kube_queue_quota_used{{quota="{scenario}", resource="cpu"}})'
    used = _prometheus_get(prometheus, "/api/v1/query", query=query)["data"]["result"]
    assert float(used[0]["value"][1]) == 10.0

"""The scheduler's extender entry: one source for the dev cluster, `kq extender --print-config` and
manifests/scheduler/; the CLI's flags."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from webhook.api.names import DEFAULT_SCHEDULER, EXTENDER_RESOURCE, FULL_SCAN_SCHEDULER
from webhook.cli import devsystem
from webhook.cli.extender import options_from_args, register
from webhook.cli.main import main
from webhook.devcluster.cluster import scheduler_config
from webhook.devcluster.config import ClusterConfig, Ports
from webhook.extender.config import SCHEDULER_SETTINGS, WEIGHT, extender_entry

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "scheduler"


def test_the_entry_is_node_cache_capable_not_ignorable_filters_and_vets_preemption() -> None:
    entry = extender_entry("http://127.0.0.1:8888/extender")
    assert entry == {
        "urlPrefix": "http://127.0.0.1:8888/extender",
        "filterVerb": "filter",
        "preemptVerb": "preempt",
        "enableHTTPS": False,
        "httpTimeout": "5s",
        "nodeCacheCapable": True,
        "ignorable": False,
        "managedResources": [{"name": EXTENDER_RESOURCE, "ignoredByScheduler": True}],
    }


def test_with_prioritize_the_unit_scores_outweigh_the_default_plugins() -> None:
    entry = extender_entry("http://127.0.0.1:8888/extender", prioritize=True)
    assert entry["prioritizeVerb"] == "prioritize"
    assert entry["weight"] == WEIGHT
    assert {k: v for k, v in entry.items() if k not in ("prioritizeVerb", "weight")} == extender_entry(
        "http://127.0.0.1:8888/extender"
    )
    default_score_plugin_weights = 3 + 2 + 2 + 2 + 2 + 1 + 1 + 1 + 1
    assert default_score_plugin_weights * 100 < WEIGHT * 10  # one unit step beats every plugin together


def test_https_turns_on_enable_https_and_a_ca_file_verification() -> None:
    entry = extender_entry("https://x:8443/extender", ca_file="/etc/ca.crt")
    assert entry["enableHTTPS"] is True
    assert entry["tlsConfig"] == {"caFile": "/etc/ca.crt"}


def test_the_manifest_says_what_the_code_says() -> None:
    doc = yaml.safe_load((MANIFESTS / "kube-scheduler-config.yaml").read_text())
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert doc["kind"] == "KubeSchedulerConfiguration"
    (extender,) = doc["extenders"]
    assert extender == extender_entry(extender["urlPrefix"])
    assert {key: doc[key] for key in SCHEDULER_SETTINGS} == SCHEDULER_SETTINGS


def test_the_dev_scheduler_runs_a_sampling_and_a_full_scan_profile_when_it_calls_the_extender(
    tmp_path: Path,
) -> None:
    assert SCHEDULER_SETTINGS == {
        "profiles": [
            {"schedulerName": DEFAULT_SCHEDULER, "pluginConfig": [{"name": "NodeAffinity", "args": {
                "addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]}]}
                ]}}
            }}]},
            {"schedulerName": FULL_SCAN_SCHEDULER, "percentageOfNodesToScore": 100},
        ]
    }
    config = ClusterConfig(state_dir=tmp_path, ports=Ports(30000))
    entry = devsystem.scheduler_extender(config)
    written = json.loads(scheduler_config(config, entry, devsystem.scheduler_settings(config)))
    assert "percentageOfNodesToScore" not in written  # the default profile samples
    assert written["profiles"] == SCHEDULER_SETTINGS["profiles"]
    assert written["extenders"] == [entry]
    plain = ClusterConfig(state_dir=tmp_path, with_service=False)
    assert devsystem.scheduler_settings(plain) == {}  # no extender: the scheduler's own default, one profile
    assert json.loads(scheduler_config(plain, None, {}))["profiles"] == [{"schedulerName": DEFAULT_SCHEDULER}]


def test_the_static_pod_listens_where_the_scheduler_config_calls() -> None:
    config = yaml.safe_load((MANIFESTS / "kube-scheduler-config.yaml").read_text())
    pod = yaml.safe_load((MANIFESTS / "extender-static-pod.yaml").read_text())
    args = pod["spec"]["containers"][0]["args"]
    assert args[0] == "extender"
    host = next(a.split("=", 1)[1] for a in args if a.startswith("--host="))
    port = next(a.split("=", 1)[1] for a in args if a.startswith("--port="))
    assert config["extenders"][0]["urlPrefix"] == f"http://{host}:{port}/extender"
    assert pod["spec"]["hostNetwork"] is True


def test_the_dev_cluster_scheduler_calls_the_dev_extender(tmp_path: Path) -> None:
    config = ClusterConfig(state_dir=tmp_path, ports=Ports(30000))
    entry = devsystem.scheduler_extender(config)
    assert entry == extender_entry("http://127.0.0.1:30008/extender")
    written = json.loads(scheduler_config(config, entry))
    assert written["extenders"] == [entry]
    (component,) = devsystem.extender_components(config, tmp_path)
    assert component.name == "kq-extender"
    assert component.port == 30008
    assert "--port=30008" in component.argv
    names = [c.name for c in devsystem.system_components(config, tmp_path)]
    assert "kq-extender" in names


def test_without_the_service_the_scheduler_gets_no_extender(tmp_path: Path) -> None:
    config = ClusterConfig(state_dir=tmp_path, with_service=False)
    assert devsystem.scheduler_extender(config) is None


def test_restart_service_restarts_only_kq_serve(tmp_path: Path) -> None:
    config = ClusterConfig(state_dir=tmp_path)
    assert "kq-extender" not in [c.name for c in devsystem.service_components(config, tmp_path)]


def test_print_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["extender", "--print-config", "https://ext:8443/extender"]) == 0
    assert json.loads(capsys.readouterr().out) == extender_entry("https://ext:8443/extender")


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["extender", *argv])


def test_flags_build_the_options(tmp_path: Path) -> None:
    (tmp_path / "c").write_text("x")
    (tmp_path / "k").write_text("x")
    options = options_from_args(parse("--port", "9000", "--cert", str(tmp_path / "c"), "--key", str(tmp_path / "k")))
    assert options.port == 9000
    assert options.scheme == "https"
    assert options_from_args(parse("--assume-ttl", "5")).assume_ttl == 5.0
    assert options_from_args(parse()).sample is True
    assert options_from_args(parse("--pass-every-node")).sample is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--cert", "c.crt"), "both --cert and --key"),
        (("--cert", "/nope/c", "--key", "/nope/k"), "does not exist"),
        (("--assume-ttl", "0"), "positive"),
    ],
)
def test_inconsistent_flags_are_refused(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        options_from_args(parse(*argv))

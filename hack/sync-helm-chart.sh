#!/usr/bin/env bash
# Copies the static objects of manifests/ into the Helm chart (manifests/helm/kube-queue/crds and files/), so
# manifests/ stays the one source of truth: run it after changing any of them.
# tests/service/test_helm_chart.py fails while a copy differs from its source.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$root/manifests/helm/kube-queue"
while read -r src dst; do
  mkdir -p "$(dirname "$chart/$dst")"
  cp "$root/manifests/$src" "$chart/$dst"
done <<'LIST'
crds/elasticquotatrees.yaml crds/elasticquotatrees.yaml
crds/queues.yaml crds/queues.yaml
crds/resourcepolicies.yaml crds/resourcepolicies.yaml
namespace.yaml files/namespace.yaml
webhook/rbac.yaml files/webhook/rbac.yaml
webhook/read-api.yaml files/webhook/read-api.yaml
webhook/webhook-configurations.yaml files/webhook/webhook-configurations.yaml
webhook/admission-policies.yaml files/webhook/admission-policies.yaml
webhook/webhook-configurations-webhook-only.yaml files/webhook/webhook-configurations-webhook-only.yaml
controller/rbac.yaml files/controller/rbac.yaml
scheduler/rbac.yaml files/scheduler/rbac.yaml
console/rbac.yaml files/console/rbac.yaml
monitoring/prometheusrule.yaml files/monitoring/prometheusrule.yaml
monitoring/grafana-dashboard.json files/monitoring/grafana-dashboard.json
LIST
echo "sync-helm-chart: copied manifests/ into $chart"

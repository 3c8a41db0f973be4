#!/usr/bin/env bash
# The alert rules: `promtool check rules` and `promtool test rules`
# (ops/prometheus/alerts_test.yml), and every rule of alerts.yml (alert or
# recording rule) named in the tests, so a new rule cannot land untested.
# Usage: alerts.sh REPO_ROOT
set -euo pipefail
cd "$1/ops/prometheus"
command -v promtool >/dev/null 2>&1 || { echo "no promtool (Debian package prometheus): skip"; exit 77; }
promtool check rules alerts.yml
promtool check config prometheus.yml
promtool test rules alerts_test.yml
missing=0
for a in $(sed -n 's/^ *- alert: *//p' alerts.yml); do
  grep -q "alertname: $a\$" alerts_test.yml || { echo "alerts.sh: alert $a has no test in alerts_test.yml" >&2; missing=1; }
done
for r in $(sed -n 's/^ *- record: *//p' alerts.yml); do
  # A recording rule is covered by a promql_expr_test on it, or by a tested
  # alert whose expression reads it.
  if ! grep -q "$r" alerts_test.yml; then
    users=$(grep -c "$r" alerts.yml)
    [ "$users" -gt 1 ] || { echo "alerts.sh: recording rule $r is used by no alert and tested by no expression" >&2; missing=1; }
  fi
done
[ "$missing" = 0 ]
echo "PASS alerts ($(grep -c '^ *- alert:' alerts.yml) alerts, $(grep -c '^ *- record:' alerts.yml) recording rules)"

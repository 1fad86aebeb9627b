#!/usr/bin/python3
"""deploy/monitoring/grafana-dashboard.json: every query is valid PromQL (promtool check rules
on each, Grafana's variables replaced), every metric selector is filtered by the dashboard's
job and instance variables (two coordinators scraped never mix), aggregations keep instances
apart, and the run's accuracy shows during a run (the workers' latest) as well as after it."""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"])
with open(f"{ROOT}/deploy/monitoring/grafana-dashboard.json") as f:
    dashboard = json.load(f)
failures = []
variables = {v["name"] for v in dashboard["templating"]["list"]}
if variables != {"job", "instance"}:
    failures.append(f"variables: {sorted(variables)}, expected job and instance")
exprs = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
for title, expr in exprs:
    for m in re.finditer(r"\b((?:localsgd|process)_[a-z_]+)(\{[^}]*\})?", expr):
        labels = m.group(2) or ""
        if 'job=~"$job"' not in labels or 'instance=~"$instance"' not in labels:
            failures.append(f"{title}: {m.group(0)} is not filtered by $job and $instance")
    for m in re.finditer(r"\bby \(([^)]*)\)", expr):
        if "instance" not in m.group(1):
            failures.append(f"{title}: 'by ({m.group(1)})' mixes coordinators")
if not any("localsgd_run_final_test_accuracy" in e and "localsgd_member_test_accuracy" in e
           for _, e in exprs):
    failures.append("no query shows the run's accuracy during a run as well as after it")

rules = {"groups": [{"name": "dashboard", "rules": [
    {"record": f"dashboard:query_{i}", "expr": e.replace("$job", ".*").replace("$instance", ".*")}
    for i, (_, e) in enumerate(exprs)]}]}
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(rules, f)  # JSON is YAML
check = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
if check.returncode != 0:
    failures.append(f"promtool check rules: {check.stdout}{check.stderr}")

for failure in failures:
    print("FAIL:", failure)
print(f"{len(exprs)} queries checked" if not failures else f"{len(failures)} failures")
sys.exit(1 if failures else 0)

#!/usr/bin/env bash
# Runs the dashboard checks with Debian's Python and promtool (scripts/setup.sh: prometheus).
exec /usr/bin/python3 "$TEST_SRCDIR/$TEST_WORKSPACE/tests/grafana_dashboard_test.py"

#!/usr/bin/env bash
# Runs the manifest checks with Debian's Python (python3-yaml).
exec /usr/bin/python3 "$TEST_SRCDIR/$TEST_WORKSPACE/tests/k8s_manifests_test.py"

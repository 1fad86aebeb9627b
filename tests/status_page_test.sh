#!/usr/bin/env bash
# The status page as an operator sees it, in headless Chromium (tests/status_page_check.py):
# a real Fashion-MNIST run charted live and its numbers checked against /status; then a run
# whose worker has a bad dataset path, and its failure text on the page. `promtool check
# metrics` on /metrics during and after the run. Screenshots go to the test's outputs.
set -euo pipefail
BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
exec /usr/bin/python3 "$BIN/tests/status_page_check.py" --bin "$BIN" --work "$TEST_TMPDIR" \
  --out "${TEST_UNDECLARED_OUTPUTS_DIR:-$TEST_TMPDIR}"

#!/usr/bin/env bash
# README command (2): installs what is missing, then runs every test: the suite
# (`bazel test //...`), the fuzz targets (scripts/fuzz.sh, 30 s each) and the suite under
# sanitizers (scripts/sanitizers.sh: ASan + UBSan everywhere, TSan on common/ and coordinator/).
# With arguments, runs only `bazel test ARGS` (e.g. a target pattern or --config=asan).
# Tests always run (no cached results); compiled objects come from the disk cache.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1

# bazel test with a one-line count of the targets at the end.
suite() {
  local log
  log="$(mktemp)"
  bazel test --nocache_test_results --test_summary=short "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local passed failed skipped
  passed=$(grep -cE '^//[^ ]+ +PASSED' "$log")
  failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|FLAKY|NO STATUS|FAILED TO BUILD)' "$log")
  skipped=$(grep -cE '^//[^ ]+ +SKIPPED' "$log")
  rm -f "$log"
  echo "targets: $passed passed, $failed failed, $skipped skipped"
  return "$rc"
}

if [[ $# -gt 0 ]]; then
  suite "$@"
  exit
fi
status=0
suite //... || status=1
scripts/fuzz.sh || status=1
scripts/sanitizers.sh || status=1
[[ $status == 0 ]] && echo "all tests passed" || echo "SOME TESTS FAILED"
exit "$status"

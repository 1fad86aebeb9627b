#!/usr/bin/env bash
# README command (2): installs what is missing and the Python package
# (scripts/install_python.sh), then runs every test: the format check
# (scripts/format_check.sh: every C++ file follows .clang-format), the layering check
# (scripts/layering_check.sh: Bazel visibility refuses a coordinator target that uses the
# worker), the suite
# (`bazel test //...`), the fuzz targets (scripts/fuzz.sh, 10 s each) and the suite under
# sanitizers (scripts/sanitizers.sh: ASan + UBSan everywhere, TSan on common/ and coordinator/).
# With arguments, runs only `bazel test ARGS` (e.g. a target pattern or --config=asan).
# Tests always run (no cached results); compiled objects come from the disk cache.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1

source scripts/suite_lib.sh

if [[ $# -gt 0 ]]; then
  suite "$@"
  rc=$?
  report_failures
  exit "$rc"
fi
status=0
# Each stage's wall time goes into the summary: CI's budget is 45 minutes (docs/development.md).
times=""
stage() {
  local name=$1 start=$SECONDS
  shift
  "$@" || status=1
  times+="${times:+, }$name $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s"
}
# The Python package for python3 (README.md, "From Accelerate"), as command (1) installs it.
stage python scripts/install_python.sh -c fastbuild
stage format scripts/format_check.sh
stage layering scripts/layering_check.sh
stage suite suite //...
stage fuzz scripts/fuzz.sh
stage sanitizers scripts/sanitizers.sh
report_failures
echo "stage times: $times"
[[ $status == 0 ]] && echo "all tests passed" || echo "SOME TESTS FAILED"
exit "$status"

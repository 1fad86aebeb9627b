#!/usr/bin/env bash
# The layering rules are enforced by Bazel visibility (each package says who may use it): a
# coordinator target depending on the worker must fail to build. //coordinator:layering_violation
# (tagged manual) is such a target; this checks that Bazel refuses it, and that //... analyses.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(bazel build --nobuild //coordinator:layering_violation 2>&1)
if [[ $? -eq 0 ]]; then
  echo "layering: //coordinator:layering_violation built; the worker is visible to the coordinator" >&2
  exit 1
fi
if ! grep -q "is not visible from target '//coordinator:layering_violation'" <<<"$out"; then
  echo "layering: //coordinator:layering_violation failed for another reason:" >&2
  echo "$out" | tail -20 >&2
  exit 1
fi
echo "layering: a coordinator target cannot depend on the worker (visibility)"

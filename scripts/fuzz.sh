#!/usr/bin/env bash
# Builds the libFuzzer targets in tests/fuzz with clang (ASan + UBSan) and runs each for
# FUZZ_SECONDS (default 10) from a copy of its checked-in seed corpus. Fails on any crash,
# leak or sanitizer report; the input that caused it is kept under $FUZZ_OUT (default a
# temporary folder, removed when every fuzzer passed) and its path printed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-10}
out=${FUZZ_OUT:-$(mktemp -d)}
fuzzers=(codec run_spec range_reducer request received_chunk)
bazel build --config=fuzz $(printf "//tests/fuzz:%s_fuzzer " "${fuzzers[@]}")
bin=$(bazel info --config=fuzz bazel-bin 2>/dev/null)/tests/fuzz
status=0
for name in "${fuzzers[@]}"; do
  corpus="$out/$name-corpus"
  mkdir -p "$corpus" "$out/$name-crashes"
  cp tests/fuzz/"$name"_corpus/* "$corpus"/
  if "$bin/${name}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$out/$name-crashes/" "$corpus" \
       >"$out/$name.log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$name.log")
    echo "fuzz $name: ${runs:-?} inputs in ${seconds} s, no crash"
  else
    echo "fuzz $name: FAILED; log $out/$name.log, inputs in $out/$name-crashes/" >&2
    tail -n 30 "$out/$name.log" >&2
    [[ -n ${SUITE_FAILURES:-} ]] && printf "fuzz %s (inputs in %s)\n  %s\n" "$name" "$out/$name-crashes/" "$out/$name.log" >>"$SUITE_FAILURES"
    status=1
  fi
done
# The default folder holds only copies of the corpora and the logs once every fuzzer passed.
[[ $status == 0 && -z ${FUZZ_OUT:-} ]] && rm -rf "$out"
exit "$status"

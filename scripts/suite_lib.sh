# Sourced by scripts/test.sh and scripts/sanitizers.sh: `suite ARGS` runs `bazel test ARGS`
# and prints a one-line count of the targets; `report_failures` (at the end of a run) prints
# each target that failed with the last lines of its log, so a CI run's last lines say what broke.
# The script that sources this first owns the list (a nested script adds to it).
if [[ -z ${SUITE_FAILURES:-} ]]; then
  SUITE_FAILURES="$(mktemp)"
  SUITE_OWNER=1
fi
export SUITE_FAILURES
# However the script ends (Ctrl-C, a kill), its temporary files go with it.
SUITE_LOG=""
trap 'rm -f "$SUITE_LOG"; [[ -z ${SUITE_OWNER:-} ]] || rm -f "$SUITE_FAILURES"' EXIT

suite() {
  local log
  log="$(mktemp)"
  SUITE_LOG=$log
  bazel test --nocache_test_results --test_summary=short "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local bad='^//[^ ]+ +(FAILED|TIMEOUT|FLAKY|NO STATUS|FAILED TO BUILD)'
  local passed failed skipped
  passed=$(grep -cE '^//[^ ]+ +PASSED' "$log")
  failed=$(grep -cE "$bad" "$log")
  skipped=$(grep -cE '^//[^ ]+ +SKIPPED' "$log")
  # A failed target's line is followed by the paths of its logs.
  awk -v bad="$bad" '$0 ~ bad {keep=1; print; next} keep && /^ +\// {print; next} {keep=0}' \
    "$log" >>"$SUITE_FAILURES"
  rm -f "$log"
  echo "targets: $passed passed, $failed failed, $skipped skipped"
  return "$rc"
}

report_failures() {
  local line target=""
  [[ -n ${SUITE_OWNER:-} ]] || return 0
  [[ -s $SUITE_FAILURES ]] || { rm -f "$SUITE_FAILURES"; return 0; }
  echo "---- what failed ----"
  while IFS= read -r line; do
    if [[ $line == " "* ]]; then  # a log of the failure above
      line=${line#"${line%%[! ]*}"}
      [[ -f $line ]] && tail -n 40 "$line" | sed "s|^|  $target: |"
    else
      target=${line%% *}
      if [[ $line == *" FLAKY"* ]]; then
        echo "FLAKY (failed, then passed when run again; a finding all the same): $line"
      else
        echo "FAILED: $line"
      fi
    fi
  done <"$SUITE_FAILURES"
  rm -f "$SUITE_FAILURES"
}

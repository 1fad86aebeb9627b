#!/usr/bin/env bash
# The README's two-host walkthrough, run as written with hosts A and B on this machine: the
# code block after its "walkthrough" marker, with HOST_A the loopback address, free ports in
# place of 50051 and 8080, the token in the test's folder, this build's binaries in place of
# bazel-bin/ (its `bazel build` line left out) and the repository's deploy/specs/. The demo
# run completes with both nodes in every round and both workers learn Fashion-MNIST.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
source "$BIN/tests/testutil/test_helpers.sh"
trap 'pkill -f -- "--token_file=$WORK/token" || true' EXIT

sed -n '/^<!-- walkthrough:/,/^```$/p' "$BIN/README.md" | sed '1,2d;$d' > "$WORK/walkthrough.sh"
[[ $(grep -c 'bazel-bin/' "$WORK/walkthrough.sh") -ge 5 ]] \
  || fail "no walkthrough found in README.md: $(cat "$WORK/walkthrough.sh")"
grpc_port=$(free_port)
http_port=$(free_port)
sed -e "s#HOST_A#127.0.0.1#g" -e "s#50051#$grpc_port#g" -e "s#8080#$http_port#g" \
  -e "s#/tmp/localsgd-token#$WORK/token#g" -e "s#bazel-bin/#$BIN/#g" \
  -e "s#deploy/specs/#$BIN/deploy/specs/#g" -e "/^bazel build /d" \
  "$WORK/walkthrough.sh" > "$WORK/run.sh"
# Run as a person would: the hosts' commands, then (once the coordinator answers; the workers
# retry on their own until it does) the operator's.
split=$(grep -n 'localsgdctl' "$WORK/run.sh" | head -n 1 | cut -d: -f1)
head -n $((split - 1)) "$WORK/run.sh" > "$WORK/hosts.sh"
tail -n +"$split" "$WORK/run.sh" > "$WORK/operator.sh"
HTTP="127.0.0.1:$http_port"
(cd "$WORK" && bash -e "$WORK/hosts.sh") >"$WORK/hosts.out" 2>&1 || fail "the hosts' commands failed"
wait_status 'True' "the coordinator did not come up" 60
(cd "$WORK" && timeout 600 bash -e "$WORK/operator.sh") >"$WORK/walkthrough.out" 2>&1 \
  || fail "the operator's commands failed (watch --until_done exits 0 only on COMPLETED): $(tail -20 "$WORK/walkthrough.out")"

expect_status 'run["state"] == "RUN_STATE_COMPLETED" and run["spec"]["min_workers"] == 2' \
  "the demo run did not complete with min_workers 2"
expect_status 'committed and all(members_of(r) == ["node-0/0", "node-1/0"] for r in committed)' \
  "not every round had both nodes"
wait_status 'sorted(results) == ["node-0/0", "node-1/0"] and
             all(r["test_accuracy"] > 0.8 for r in results.values())' \
  "the workers did not learn Fashion-MNIST" 30
echo PASS

#!/usr/bin/env bash
# Issue 50, finding 9: a coordinator that binds node names to keys (--node_key_secret_file)
# admits a worker only with its node's key, which localsgdctl node_key makes from the secret:
# a worker with the run token alone, or with another node's key, is refused with one line
# naming node_key and leaves no member behind; the node's own key joins and trains the run.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "node-key-token" > "$WORK/token"
head -c 32 /dev/urandom | base64 > "$WORK/secret"
source "$BIN/tests/testutil/test_helpers.sh"

ctl() { "$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" "$@"; }

# The key needs the secret and a node; no coordinator is asked.
rc=0
"$BIN/coordinator/localsgdctl" node_key --node_key_secret_file="$WORK/secret" 2>/dev/null || rc=$?
[[ $rc == 2 ]] || fail "node_key without --node: exit $rc, not 2"
"$BIN/coordinator/localsgdctl" node_key --node=node-0 --node_key_secret_file="$WORK/secret" \
  > "$WORK/node-0.key" || fail "node_key failed"
"$BIN/coordinator/localsgdctl" node_key --node=node-1 --node_key_secret_file="$WORK/secret" \
  > "$WORK/node-1.key" || fail "node_key failed"
[[ $(wc -c < "$WORK/node-0.key") == 65 ]] || fail "a key is 64 hex digits: $(cat "$WORK/node-0.key")"
cmp -s "$WORK/node-0.key" "$WORK/node-1.key" && fail "two nodes got the same key"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 \
  --token_file="$WORK/token" --node_key_secret_file="$WORK/secret"
grep -qF "node keys required" "$WORK/coord.err" || fail "the coordinator does not say it requires node keys"
expect_status 's["node_keys_required"] == True' "status does not say node keys are required"
start_run <<SPEC
model { builtin: "mlp" }
dataset { synthetic_samples: 2048 }
local_sgd_steps: 4
total_steps: 16
batch_size: 32
min_workers: 1
SPEC

worker() {  # extra flags
  "$BIN/worker/worker" --coordinator="$GRPC" --token_file="$WORK/token" --node_name=node-0 \
    --connect_timeout=5s --rendezvous_dir="$WORK" "$@"
}
expect_refused() {  # message, then worker flags
  local message=$1 out rc=0
  shift
  out=$(worker "$@" 2>&1) || rc=$?
  [[ $rc -ne 0 ]] || fail "an impostor joined ($*)"
  grep -qF -- "$message" <<<"$out" || fail "expected \"$message\" in: $out"
  members=$(curl -fsS "http://$HTTP/metrics" | sed -n 's/^localsgd_members //p')
  [[ "$members" == "0" ]] || fail "a member was admitted: $message"
}
expect_refused "node_key: required"
expect_refused "node_key: not the key of node \"node-0\"" --node_key_file="$WORK/node-1.key"
expect_refused "--node_key_file: " --node_key_file="$WORK/missing.key"

worker --node_key_file="$WORK/node-0.key" > "$WORK/w00.out" 2> "$WORK/w00.err" \
  || fail "the worker with its node's key failed"
expect_status 'run["state"] == "RUN_STATE_COMPLETED" and run["global_step"] == 16' \
  "the run with the node's key did not complete"
echo "PASS"

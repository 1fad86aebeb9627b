#!/usr/bin/env bash
# StopRun racing the rounds, with real processes, 30 times (issue 12, finding 1): each time a
# coordinator on the same state folder, two node leaders syncing rounds as fast as they can
# (//tests/testutil:averaging_member, star and sharded in turn), a StopRun at a random moment in the
# rounds, then SIGKILL of the coordinator at once. Every restart must start; a star run's model
# file and its run record must agree about the last committed round, and a sharded run's record
# keeps its model's layout and digests (the model itself lives with the node leaders, killed
# here: the coordinator says so).
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "race-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"
flags=(--state_dir="$WORK/state" --token_file="$WORK/token" --lease_timeout=30s)
ctl() { "$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" "$@"; }
status_field() { status_value "run[\"$1\"]" | tr -d '"'; }  # a field of the run, from /status

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 "${flags[@]}"
port_flags=(--grpc_address="$GRPC" --http_address="$HTTP")
RANDOM=12  # a fixed seed: the same stop moments every time
# Under the sanitizers (scripts/sanitizers.sh) 10 times: each takes 5x longer there.
for i in $(seq 1 "$([[ -n ${LOCALSGD_SANITIZED:-} ]] && echo 10 || echo 30)"); do
  exchange=$([[ $((i % 2)) == 0 ]] && echo EXCHANGE_STAR || echo EXCHANGE_SHARDED)
  members=()
  for node in 0 1; do
    "$BIN/tests/testutil/averaging_member" --coordinator="$GRPC" --token=race-token --node="node-$node" \
      --values=200000 --rounds=100000 >"$WORK/m$node.out" 2>"$WORK/m$node.err" &
    members+=($!)
    pids+=($!)
  done
  start_run <<SPEC
model { builtin: "mlp" } min_workers: 2 total_steps: 1000000000 round_deadline_seconds: 5
chunk_bytes: 65536 min_shard_bytes: 0 exchange: $exchange
SPEC
  # Let some rounds commit, then stop at a random moment among the next ones (a random
  # delay of 0 to 90 ms: the race this test is about).
  wait_status 'run["round"] >= 2' "iteration $i ($exchange): no rounds" 15
  sleep "0.0$((RANDOM % 10))"
  ctl stop --reason="race $i" >/dev/null || fail "iteration $i: stop failed"
  kill -9 "$coord_pid"
  for m in "${members[@]}"; do kill -9 "$m" 2>/dev/null || true; wait "$m" 2>/dev/null || true; done
  wait "$coord_pid" 2>/dev/null || true
  mv "$WORK/coord.err" "$WORK/coord-$i.err"
  # The restart: it must start, and the saved model must be the last committed round.
  start_coordinator "${port_flags[@]}" "${flags[@]}"
  state=$(status_field state)
  [[ $state == RUN_STATE_STOPPED ]] || fail "iteration $i: run is $state after the restart"
  recorded=$(status_field round)
  if [[ $exchange == EXCHANGE_SHARDED ]]; then
    expect_status 'int(run["model"]["vector_length"]) == 200000 and
                   len(run["model"]["fragment_digests"]) == 1' \
      "iteration $i: the run record keeps no layout and digest of the sharded model"
    if fetched=$(ctl fetch --out="$WORK/model.f32" 2>&1); then
      fail "iteration $i: a sharded run's model came from nowhere: $fetched"
    fi
    [[ $fetched == *"keeps no copy"* ]] || fail "iteration $i: fetch: $fetched"
    continue
  fi
  fetched=$(ctl fetch --out="$WORK/model.f32") || fail "iteration $i: fetch failed"
  [[ $fetched == *" round $recorded "* ]] \
    || fail "iteration $i ($exchange): run record says round $recorded, model: $fetched"
done
echo "PASS: 30 stops during rounds, 30 restarts, model (or digests) and record agreed every time"

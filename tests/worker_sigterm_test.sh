#!/usr/bin/env bash
# SIGTERM stops a training worker after its current step: it leaves the coordinator and exits
# 143 (128 + SIGTERM: a job runner must not count it as a success) at once, without waiting
# for a last sync the others are not ready for. SIGINT (Ctrl-C) stops a worker that is still
# retrying an unreachable coordinator just as promptly, exit 130.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "term-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token"
for node in 0 1; do
  "$BIN/worker/worker" --coordinator="$GRPC" --token_file="$WORK/token" --node_name="node-$node" \
    --node_rank=$node --num_nodes=2 --log_every=5 >"$WORK/w$node.out" 2>"$WORK/w$node.err" &
  pids+=($!)
done
victim=${pids[1]}
echo 'model { builtin: "mlp" } total_steps: 100000 local_sgd_steps: 4 min_workers: 2' | start_run
for _ in $(seq 1 600); do grep -q ' step 10/' "$WORK/w0.out" && break; sleep 0.1; done
grep -q ' step 10/' "$WORK/w0.out" || fail "training did not start"

kill -TERM "$victim"
start=$(date +%s)
rc=0
wait "$victim" || rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc -eq 143 ]] || fail "worker exited $rc on SIGTERM, not 143"
(( elapsed < 20 )) || fail "worker took ${elapsed}s to stop"
grep -q "(stopped early)" "$WORK/w0.out" || fail "no early-stop report: $(cat "$WORK/w0.out")"
curl -fsS "http://$HTTP/status" | grep -q "node-0/0 left: stopped by signal" \
  || fail "the worker's leaving is not among the events"

# Ctrl-C while the worker retries a coordinator that is not there (nothing listens on the
# port of a coordinator stopped just now).
dead=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN/worker/worker" --coordinator="127.0.0.1:$dead" --connect_timeout=5m \
  >"$WORK/retry.out" 2>"$WORK/retry.err" &
retrying=$!
for _ in $(seq 1 100); do grep -q "unreachable" "$WORK/retry.err" && break; sleep 0.1; done
grep -q "unreachable" "$WORK/retry.err" || fail "the worker does not retry: $(cat "$WORK/retry.err")"
kill -INT "$retrying"
start=$(date +%s)
rc=0
wait "$retrying" || rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc -eq 130 ]] || fail "worker exited $rc on SIGINT while connecting, not 130"
(( elapsed < 5 )) || fail "worker took ${elapsed}s to stop while connecting"
grep -q "stopped by signal while connecting" "$WORK/retry.err" || fail "$(cat "$WORK/retry.err")"
echo PASS

#!/usr/bin/env bash
# SIGTERM stops a training worker after its current step: it leaves the coordinator and exits
# 143 (128 + SIGTERM: a job runner must not count it as a success) at once, without waiting
# for a last sync the others are not ready for. It leaves preempted: once every worker was
# preempted the run is still RUNNING (not COMPLETED), and workers started again resume from
# the committed model and step. SIGINT (Ctrl-C) stops a worker that is still retrying an
# unreachable coordinator just as promptly, exit 130.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "term-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token"
start_worker() {  # NODE LOG_SUFFIX
  mkdir -p "$WORK/rdv$2"
  "$BIN/worker/worker" --coordinator="$GRPC" --token_file="$WORK/token" --node_name="node-$1" \
    --node_rank="$1" --num_nodes=2 --log_every=5 --rendezvous_dir="$WORK/rdv$2" \
    --checkpoint_dir="$WORK/checkpoints" \
    >"$WORK/w$1$2.out" 2>"$WORK/w$1$2.err" &
  pids+=($!)
}
for node in 0 1; do start_worker $node ""; done
survivor=${pids[2]}  # pids[0] is the coordinator
victim=${pids[1]}
echo 'model { builtin: "mlp" } total_steps: 100000 local_sgd_steps: 4 min_workers: 2' | start_run
wait_status 'members["node-0/0"]["step"] >= 10' "training did not start"

kill -TERM "$victim"
start=$(date +%s)
rc=0
wait "$victim" || rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc -eq 143 ]] || fail "worker exited $rc on SIGTERM, not 143"
(( elapsed < 20 )) || fail "worker took ${elapsed}s to stop"
# (The run goes on with node-1; results are the run's once it ends.)
expect_status 'any(e["text"].endswith("left: stopped by signal") for e in events("worker_left", "node-0/0"))' \
  "the worker's leaving (stopped by signal) is not among the events"

# Preemption is not success: with both workers preempted the run keeps RUNNING (it waits for
# workers within quorum_timeout_seconds), and each one's leaving says preempted.
kill -TERM "$survivor"
rc=0
wait "$survivor" || rc=$?
[[ $rc -eq 143 ]] || fail "the second worker exited $rc on SIGTERM, not 143"
expect_status 'run["state"] == "RUN_STATE_RUNNING"' "the run ended when its workers were preempted"
for node in 0 1; do
  expect_status "any('was preempted and left' in e['text'] for e in events('worker_left', 'node-$node/0'))" \
    "node-$node's leaving is not recorded as a preemption"
done
preempted_at=$(status_value 'run["global_step"]')
(( preempted_at > 0 )) || fail "no round committed before the preemption"
# Started again, the workers resume from the committed model and step, and the run goes on.
for node in 0 1; do start_worker $node "-again"; done
wait_status "run[\"global_step\"] > $preempted_at" "the restarted workers did not go on" 120
for node in 0 1; do
  grep -q "resuming from the global model at step" "$WORK/w$node-again.out" "$WORK/w$node-again.err" ||
    fail "node-$node did not resume from the committed model"
done
for p in "${pids[@]: -2}"; do kill -TERM "$p" 2>/dev/null || true; done

# Ctrl-C while the worker retries a coordinator that does not answer: a listener that closes
# every connection at once, and counts them in $WORK/attempts.
/usr/bin/python3 - "$WORK" >"$WORK/refuser.out" 2>&1 <<'PY' &
import os, socket, sys
work = sys.argv[1]
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(16)
with open(f"{work}/port.tmp", "w") as f:
    f.write(str(server.getsockname()[1]))
os.rename(f"{work}/port.tmp", f"{work}/port")
count = 0
while True:
    connection, _ = server.accept()
    connection.close()
    count += 1
    with open(f"{work}/attempts.tmp", "w") as f:
        f.write(str(count))
    os.rename(f"{work}/attempts.tmp", f"{work}/attempts")
PY
pids+=($!)
for _ in $(seq 1 100); do [[ -s "$WORK/port" ]] && break; sleep 0.1; done
[[ -s "$WORK/port" ]] || fail "the listener did not start"
"$BIN/worker/worker" --coordinator="127.0.0.1:$(cat "$WORK/port")" --connect_timeout=5m \
  >"$WORK/retry.out" 2>"$WORK/retry.err" &
retrying=$!
pids+=("$retrying")
# Two connection attempts: the worker is retrying.
for _ in $(seq 1 200); do [[ $(cat "$WORK/attempts" 2>/dev/null || echo 0) -ge 2 ]] && break; sleep 0.1; done
[[ $(cat "$WORK/attempts" 2>/dev/null || echo 0) -ge 2 ]] || fail "the worker does not retry"
kill -INT "$retrying"
start=$(date +%s)
rc=0
wait "$retrying" || rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc -eq 130 ]] || fail "worker exited $rc on SIGINT while connecting, not 130"
(( elapsed < 5 )) || fail "worker took ${elapsed}s to stop while connecting"
echo PASS

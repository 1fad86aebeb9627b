#!/usr/bin/env bash
# A node 10x slower than the others (let run 10 ms of every 100 ms, as a throttled host) in real
# processes with a real coordinator, three nodes of one rank:
# - fixed K with a grace window (round_grace_seconds 0.5 after 2 of 3): the slow node arrives
#   seconds after the others, and no committed round waits for it more than the grace window:
#   every committed round takes at most the window plus 1 s (a round of the fast nodes alone
#   takes milliseconds here; one that waited for the slow node would take its seconds), and some
#   round left it out for the window, not held at fault;
# - paced (round_seconds 0.1, the fast nodes' time for about K steps; the same grace window): the slow node trains fewer steps a round
#   and is in rounds with the others, its steps and weight in their records below theirs.
# The nodes keep checkpoints: a node left behind takes the run's final model from one after the
# others have left (a sharded run's model lives with its nodes).
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "straggler-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"
start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token"

GRACE=0.5
run() {  # name, extra spec
  local name=$1 extra=$2
  workers=()
  start_workers 3 1 --threads=1 --checkpoint_dir="$WORK/checkpoints"
  wait_status 'len([m for m in members.values() if m.get("node_leader")]) == 3' \
    "$name: the three nodes did not join" 60
  start_run <<SPEC
name: "$name"
model { builtin: "mlp" }
local_sgd_steps: 600
total_steps: 9000
batch_size: 32
min_workers: 2
round_grace_seconds: $GRACE
$extra
SPEC
  # Slowed once it has synced with the others (its start is not what is measured).
  wait_status 'run["spec"]["name"] == "'"$name"'" and any(len(r["members"]) == 3 for r in committed if r["run_id"] == run["run_id"])' \
    "$name: no round with all three nodes" 60
  # The rounds measured are those after the last one committed before the slowing (the first
  # rounds wait for a node still loading its data, which a loaded machine makes seconds).
  slowed_after=$(status_value 'max(r["round"] for r in committed if r["run_id"] == run["run_id"])')
  /usr/bin/python3 "$BIN/tests/testutil/duty_cycle.py" "${worker_pids[20]}" 10 100 &
  local throttle=$!
  pids+=("$throttle")
  for p in "${workers[@]:0:2}"; do wait "$p" || fail "$name: worker $p failed"; done
  kill "$throttle" 2>/dev/null || true
  wait "${workers[2]}" || fail "$name: the slow worker failed"
  wait_status 'run["spec"]["name"] == "'"$name"'" and run["state"] == "RUN_STATE_COMPLETED"' \
    "$name: the run did not complete" 30
}

run fixed ""
measured='[r for r in committed if r["run_id"] == run["run_id"] and r["round"] > '"$slowed_after"']'
expect_status "$measured"' and all(r["duration_seconds"] <= '"$GRACE"' + 1.0 for r in '"$measured"')' \
  "fixed: a committed round waited longer than the grace window for the slow node"
expect_status 'any(d["member_id"] == "node-2/0" and "grace window" in d["reason"] for r in committed if r["run_id"] == run["run_id"] for d in r.get("dropped", []))' \
  "fixed: no round left the slow node out for the grace window"
python3 "$BIN/tests/testutil/status_query.py" "$HTTP" \
  '[(r["round"], round(r["duration_seconds"], 3), sorted(r["members"]), [d["member_id"] for d in r.get("dropped", [])]) for r in committed if r["run_id"] == run["run_id"]]' --print

run paced "round_seconds: 0.1"
expect_status 'any(sh["node-2/0"] * 2 <= min(sh["node-0/0"], sh["node-1/0"]) for r in committed if r["run_id"] == run["run_id"] for sh in [{x["member_id"]: x["steps"] for x in r.get("shares", [])}] if len(sh) == 3)' \
  "paced: no round had the slow node in it with fewer steps than the others"
python3 "$BIN/tests/testutil/status_query.py" "$HTTP" \
  '[(r["round"], round(r["duration_seconds"], 3), {x["member_id"]: x["steps"] for x in r.get("shares", [])}) for r in committed if r["run_id"] == run["run_id"]]' --print
echo PASS

#!/usr/bin/env bash
# A node leader SIGKILLed in the middle of a round, with real processes. EXCHANGE (the run's
# exchange mode) is EXCHANGE_STAR or EXCHANGE_SHARDED. Star: the coordinator drops it when its
# stream breaks, the round commits with the two others, and they finish. Sharded: the round
# goes round the ring of the three leaders and the dead one owns a range, so the round aborts
# at once; the survivors keep their weights, try again, and the round commits without it
# (a ring of the two) once its lease expires.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "kill-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token" \
  --lease_timeout=3s --heartbeat_interval=1s

member() {  # node, extra flags...
  local node=$1; shift
  "$BIN/tests/testutil/averaging_member" --coordinator="$GRPC" --token=kill-token --node="$node" \
    --values=600000 --rounds=2 "$@" >"$WORK/$node.out" 2>"$WORK/$node.err" &
  pids+=($!)
}
member node-0
member node-1
member node-2 --stall_in_round=1
victim=${pids[-1]}

cat > "$WORK/spec.textproto" <<SPEC
model { builtin: "mlp" } min_workers: 2 total_steps: 1000 round_deadline_seconds: 120
chunk_bytes: 262144 min_shard_bytes: 0 exchange: ${EXCHANGE}
SPEC
# Rounds need 2 workers; the run is started once all three have joined.
wait_status 'len(members) == 3' "the three members did not join" 30
"$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" start \
  --spec="$WORK/spec.textproto" >/dev/null

for _ in $(seq 1 600); do grep -q '^stalled' "$WORK/node-2.out" && break; sleep 0.1; done
grep -q '^stalled' "$WORK/node-2.out" || fail "node-2 never stalled"
kill -9 "$victim"

for node in node-0 node-1; do
  wait "${pids[$([[ $node == node-0 ]] && echo 1 || echo 2)]}" || fail "$node failed"
done
# What happened, from the coordinator's /status.
if [[ $EXCHANGE == EXCHANGE_SHARDED ]]; then
  # The dead leader owned a range: round 1 aborted naming it, then both rounds committed
  # without it, sharded over the two survivors.
  expect_status 'any("node-2/0" in r["reason"] for r in rounds if r["outcome"] == "ROUND_OUTCOME_ABORTED")' \
    "no aborted round names node-2/0"
  # Leaders that each own a range of an fp32 vector go round a ring: the three that round 1
  # began with, then the two survivors.
  expect_status 'all(r["ring"] for r in rounds if r["outcome"] == "ROUND_OUTCOME_ABORTED"
                     and "node-2/0" in r["reason"])' "the round node-2 died in was not a ring round"
  expect_status 'all(r["ring"] for r in committed)' "a round of the two survivors was not a ring round"
  expect_status '[r["round"] for r in committed] == [1, 2]' "rounds 1 and 2 not committed"
  expect_status 'all(members_of(r) == ["node-0/0", "node-1/0"] and r["exchange"] == "EXCHANGE_SHARDED"
                     and len(r["shards"]) == 2 for r in committed)' "not sharded over the survivors"
  expect_status 'run["round"] == 2' "the run is not at round 2"
  echo PASS
  exit 0
fi
# Star: the killed process's stream broke in round 1, which committed with the other two (its
# lease then expired before round 2).
expect_status 'any(r["round"] == 1 and any(d["member_id"] == "node-2/0" and
                   ("closed its stream" in d["reason"] or "stream ended" in d["reason"])
                   for d in r["dropped"]) for r in rounds)' \
  "node-2 not dropped from round 1 when its stream broke"
expect_status 'any(r["round"] == 1 and members_of(r) == ["node-0/0", "node-1/0"] for r in committed)' \
  "round 1 not committed with the two others"
expect_status 'run["round"] == 2' "round 2 not committed"
echo PASS

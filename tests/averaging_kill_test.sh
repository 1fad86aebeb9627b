#!/usr/bin/env bash
# A node leader SIGKILLed in the middle of a round, with real processes. EXCHANGE (the run's
# exchange mode) is EXCHANGE_STAR or EXCHANGE_SHARDED. Star: the coordinator drops it when its
# stream breaks, the round commits with the two others, and they finish. Sharded: the dead
# leader owns a range, so the round aborts at once; the survivors keep their weights, try
# again, and the round commits without it once its lease expires.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "kill-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token" \
  --lease_timeout=3s --heartbeat_interval=1s

member() {  # node, extra flags...
  local node=$1; shift
  "$BIN/bench/averaging_member" --coordinator="$GRPC" --token=kill-token --node="$node" \
    --values=600000 --rounds=2 "$@" >"$WORK/$node.out" 2>"$WORK/$node.err" &
  pids+=($!)
}
member node-0
member node-1
member node-2 --stall_in_round=1
victim=${pids[-1]}

cat > "$WORK/spec.textproto" <<SPEC
model { builtin: "mlp" } min_workers: 3 total_steps: 1000 round_deadline_seconds: 120
chunk_bytes: 262144 exchange: ${EXCHANGE}
SPEC
# Rounds need 2 workers; the run is started once all three have joined.
sed -i 's/min_workers: 3/min_workers: 2/' "$WORK/spec.textproto"
for _ in $(seq 1 300); do
  [[ $(curl -fsS "http://$HTTP/metrics" | sed -n 's/^localsgd_members //p') == 3 ]] && break
  sleep 0.1
done
"$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" start \
  --spec="$WORK/spec.textproto" >/dev/null

for _ in $(seq 1 600); do grep -q '^stalled' "$WORK/node-2.out" && break; sleep 0.1; done
grep -q '^stalled' "$WORK/node-2.out" || fail "node-2 never stalled"
kill -9 "$victim"

for node in node-0 node-1; do
  wait "${pids[$([[ $node == node-0 ]] && echo 1 || echo 2)]}" || fail "$node failed"
  grep -q '^round 1 seconds' "$WORK/$node.out" || fail "$node did not finish round 1"
done
status=$(curl -fsS "http://$HTTP/status")
if [[ $EXCHANGE == EXCHANGE_SHARDED ]]; then
  python3 - "$status" <<'PY' || fail "sharded rounds did not go as expected: $status"
import json, sys
status = json.loads(sys.argv[1])
rounds = status["recent_rounds"]
aborted = [r for r in rounds if r["outcome"] == "ROUND_OUTCOME_ABORTED"]
committed = [r for r in rounds if r["outcome"] == "ROUND_OUTCOME_COMMITTED"]
assert aborted and "node-2/0" in aborted[0]["reason"], aborted
assert [r["round"] for r in committed] == ["1", "2"], committed
for r in committed:
    assert r["members"] == ["node-0/0", "node-1/0"], r
    assert r["exchange"] == "EXCHANGE_SHARDED" and len(r["shards"]) == 2, r
assert status["run"]["round"] == "2", status["run"]
PY
  grep -q '^round 1 aborted' "$WORK/node-0.out" || fail "node-0 was not told round 1 aborted"
  echo PASS
  exit 0
fi
grep -q '"member_id": "node-2/0"' <<<"$status" || fail "node-2 not recorded as dropped: $status"
# The killed process's stream broke in round 1 (its lease then expired before round 2).
grep -q "round 1: dropped node-2/0: closed its stream\|round 1: dropped node-2/0: stream ended" \
  "$WORK/coord.err" || fail "node-2 not dropped from round 1 when its stream broke"
grep -q "round 1 committed: 2 of 3 members" "$WORK/coord.err" || fail "round 1 not committed"
grep -q '"round": "2"' <<<"$status" || fail "round 2 not committed"
echo PASS

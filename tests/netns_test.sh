#!/usr/bin/env bash
# Several machines on one machine: the coordinator and two worker nodes in their own network
# namespaces, joined by veth pairs through a bridge and shaped to 100 Mbit/s with tc; a run
# over those links completes.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
PREFIX="lt$$"
PREFIX=${PREFIX:0:8}
source "$BIN/tests/testutil/test_helpers.sh"
trap 'kill_started; "$BIN/deploy/netns/hosts.sh" down "$PREFIX" 3' EXIT
[[ $(id -u) -eq 0 ]] || fail "needs root for ip netns"
"$BIN/deploy/netns/hosts.sh" up "$PREFIX" 3 100mbit || fail "cannot create namespaces"

echo -n "netns-token" > "$WORK/token"
COORDINATOR_HOST="ip netns exec $PREFIX-h0"  # also for the /status queries below
start_coordinator --grpc_address=10.77.0.1:50051 \
  --http_address=10.77.0.1:8080 --token_file="$WORK/token"
workers=()
for node in 1 2; do
  ip netns exec "$PREFIX-h$node" "$BIN/worker/worker" --coordinator=10.77.0.1:50051 \
    --token_file="$WORK/token" --node_name="node-$node" --node_rank=$((node - 1)) --num_nodes=2 \
    --rendezvous_dir="$WORK" >"$WORK/w$node.out" 2>"$WORK/w$node.err" &
  pids+=($!)
  workers+=($!)
done
cat > "$WORK/spec.textproto" <<SPEC
model { builtin: "mlp" } dataset { synthetic_samples: 2048 } local_sgd_steps: 4
total_steps: 16 batch_size: 32 min_workers: 2
SPEC
ip netns exec "$PREFIX-h0" "$BIN/coordinator/localsgdctl" --coordinator=10.77.0.1:50051 \
  --token_file="$WORK/token" start --spec="$WORK/spec.textproto" >/dev/null || fail "start"
for p in "${workers[@]}"; do wait "$p" || fail "worker failed"; done
expect_status 'run["state"] == "RUN_STATE_COMPLETED" and run["round"] == 4 and run["global_step"] == 16' \
  "run not completed"
# Both workers, each in its own host's namespace, took part to the end.
expect_status 'sorted(w for w, r in results.items() if r["left_reason"] == "finished") ==
               ["node-1/0", "node-2/0"]' "not both workers finished"
echo PASS

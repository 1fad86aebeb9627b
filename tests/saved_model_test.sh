#!/usr/bin/env bash
# The trained model as a user gets it: a real Fashion-MNIST run saves it, and the README's
# Python snippet (run as written, nothing from this project imported) loads it with
# torch.jit.load, feeds it raw pixels and prints the test accuracy the worker reported.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "model-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

# Whether two TorchScript files hold the same parameters, bit for bit.
same_model() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, torch
a, b = ([p.detach() for p in torch.jit.load(f).parameters()] for f in sys.argv[1:3])
sys.exit(0 if len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b)) else 1)
PY
}

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token"
start_workers 2 1 --log_every=100000 --save_model="$WORK/model.pt" --checkpoint_dir="$WORK/ckpt"
start_run <<SPEC
model { builtin: "mlp" }
dataset { kind: DATASET_KIND_FASHION_MNIST path: "/usr/share/datasets/fashion-mnist" }
local_sgd_steps: 8
total_steps: 400
batch_size: 64
min_workers: 2
optimizer { lr: 0.05 momentum: 0.9 }
SPEC
for p in "${workers[@]}"; do wait "$p" || fail "worker $p failed"; done
reported=$(sed -n 's/.* done: .*test accuracy \([0-9.]*\),.*/\1/p' "$WORK/w00.out")
[[ -n "$reported" ]] || fail "no test accuracy reported: $(cat "$WORK/w00.out")"

# The README's snippet, exactly as written there.
sed -n '/^# localsgd: load the trained model$/,/^```$/p' "$BIN/README.md" | sed '$d' > "$WORK/load.py"
[[ $(wc -l < "$WORK/load.py") -gt 5 ]] || fail "no snippet found in README.md"
out=$(cd "$WORK" && /usr/bin/python3 load.py "$WORK/model.pt") || fail "the snippet failed: $out"
echo "$out"
loaded=$(sed -n 's/^test accuracy \([0-9.]*\)$/\1/p' <<<"$out")
/usr/bin/python3 -c "import sys; sys.exit(abs($loaded - $reported) > 0.0015)" \
  || fail "the loaded model scores $loaded, the worker reported $reported"
/usr/bin/python3 -c "import sys; sys.exit($loaded < 0.7)" || fail "accuracy $loaded: not trained"
grep -q "^test_accuracy: " <<<"$out" || fail "no metrics beside the model: $out"
grep -q "^run_id: \"run-" <<<"$out" || fail "no run record beside the model: $out"
echo "PASS: loaded $loaded, reported $reported"

# Issue 54: each node leader wrote its checkpoint, the last one the run's final round, and the
# run record names it; export_model turns it into the same TorchScript model without asking the
# members (they are gone).
final_round=$(status_value 'run["round"]')
checkpoint=$(status_value 'run["checkpoint"]["path"]' | tr -d '"')
[[ $(status_value 'run["checkpoint"]["round"]') == "$final_round" ]] \
  || fail "the run's checkpoint is not its final round $final_round: $(status_value 'run.get("checkpoint")')"
for node in node-0 node-1; do
  [[ -f "$WORK/ckpt/$node/checkpoint.bin" ]] || fail "$node wrote no checkpoint"
done
grep -q "checkpoint of round $final_round " "$WORK/w00.err" || fail "node-0's last checkpoint: $(grep checkpoint "$WORK/w00.err")"
"$BIN/worker/export_model" --coordinator="$GRPC" --token_file="$WORK/token" \
  --checkpoint="$checkpoint" --out="$WORK/from_checkpoint.pt" || fail "export_model --checkpoint failed"
same_model "$WORK/from_checkpoint.pt" "$WORK/model.pt" || fail "the checkpoint is not the run's final model"
echo "PASS: the checkpoint of round $final_round ($checkpoint) is the run's final model"

# Issue 37 (the chaos soak's "nobody saved the model"): node 0 that joins a run but has not
# begun training when the other node completes it still saves the run's final global model.
# Its rank 1 never comes, so rank 0 waits to form its node until the run has ended (node 1's
# rounds wait for node 0's leader until the deadline, then without it once it is suspended).
run_worker() {  # NODE RANK RANKS LOG [FLAGS...]
  local node=$1 rank=$2 ranks=$3 log=$4
  shift 4
  "$BIN/tests/testutil/dumping_worker" --coordinator="$GRPC" --token_file="$WORK/token" \
    --node_name="node-$node" --node_rank="$node" --num_nodes=2 --local_rank="$rank" \
    --local_world_size="$ranks" --rendezvous_dir="$WORK" --dump_dir="$WORK/dump" \
    --log_every=100000 "$@" >"$WORK/$log.out" 2>"$WORK/$log.err" &
  pids+=($!)
  last_pid=$!
}
run_worker 0 0 2 late00 --save_model="$WORK/late.pt"
late=$last_pid
run_worker 1 0 1 late10 --checkpoint_dir="$WORK/late-checkpoints"
alone=$last_pid
start_run <<SPEC
model { builtin: "mlp" }
dataset { kind: DATASET_KIND_FASHION_MNIST path: "/usr/share/datasets/fashion-mnist" }
local_sgd_steps: 8
total_steps: 200
batch_size: 64
min_workers: 1
round_deadline_seconds: 2
optimizer { lr: 0.05 momentum: 0.9 }
SPEC
wait "$alone" || fail "node-1 failed"
wait "$late" || fail "node-0's rank 0 failed"
grep -q "before this worker began training" "$WORK/late00.out" || fail "node-0 trained after all"
[[ -f "$WORK/late.pt" ]] || fail "node-0 did not save the completed run's model"
alone_accuracy=$(sed -n 's/.* done: .*test accuracy \([0-9.]*\),.*/\1/p' "$WORK/late10.out")
out=$(cd "$WORK" && /usr/bin/python3 load.py "$WORK/late.pt") || fail "the snippet failed: $out"
echo "$out"
late_accuracy=$(sed -n 's/^test accuracy \([0-9.]*\)$/\1/p' <<<"$out")
/usr/bin/python3 -c "import sys; sys.exit(abs($late_accuracy - $alone_accuracy) > 0.0015)" \
  || fail "node-0 saved a model scoring $late_accuracy, the run's final model scores $alone_accuracy"
second_run=$(status_value 'run["run_id"]' | tr -d '"')
grep -q "^run_id: \"$second_run\"" <<<"$out" || fail "the saved model is not run $second_run's: $out"
echo "PASS: node 0 saved run $second_run's final model after the run completed without it"

# Issue 49: a run an operator stops mid-way. Each rank stops on its own weights; node 0 saves
# the run's last committed global model (what `localsgdctl fetch` returns), labelled with that
# round, not its own weights under the round's name.
workers=()
start_workers 2 1 --log_every=100000 --save_model="$WORK/stopped.pt" --device=auto \
  --checkpoint_dir="$WORK/stopped-checkpoints"
start_run <<SPEC
model { builtin: "mlp" }
dataset { kind: DATASET_KIND_FASHION_MNIST path: "/usr/share/datasets/fashion-mnist" }
local_sgd_steps: 8
total_steps: 100000
batch_size: 64
min_workers: 2
optimizer { lr: 0.05 momentum: 0.9 }
SPEC
wait_status 's["run"].get("round", 0) >= 4' "the run committed no 4 rounds" 120
"$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" stop >/dev/null \
  || fail "localsgdctl stop failed"
for p in "${workers[@]}"; do wait "$p" || fail "worker $p failed after the stop"; done
# --device=auto (the Kubernetes workers' flag) trains on the CPU where there is no GPU.
grep -q "node-0/0 trains on cpu" "$WORK/w00.err" || fail "--device=auto: $(grep trains "$WORK/w00.err")"
third_run=$(status_value 'run["run_id"]' | tr -d '"')
"$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" fetch \
  --run_id="$third_run" --out="$WORK/stopped.f32" >/dev/null || fail "localsgdctl fetch failed"
saved_round=$(sed -n 's/.*saved the trained model (run [^,]*, round \([0-9]*\),.*/\1/p' "$WORK/w00.out")
[[ -n "$saved_round" ]] || fail "node 0 saved no model: $(cat "$WORK/w00.out")"
run_round=$(status_value 'run["round"]')
[[ $saved_round == "$run_round" ]] || fail "saved as round $saved_round, the run ended at $run_round"
/usr/bin/python3 - "$WORK/stopped.pt" "$WORK/stopped.f32" <<'PY' || fail "the saved model is not the run's"
import sys, torch
model = torch.jit.load(sys.argv[1])
saved = torch.cat([p.detach().flatten() for p in model.parameters()])
fetched = torch.from_file(sys.argv[2], size=saved.numel(), dtype=torch.float32)
print(f"saved {saved.numel()} values; largest difference from the run's model "
      f"{(saved - fetched).abs().max().item()}")
sys.exit(0 if torch.equal(saved, fetched) else 1)
PY
echo "PASS: node 0 saved round $saved_round of the stopped run $third_run, the run's own model"

# The run's model as a TorchScript file from the coordinator, without --save_model: the same
# values, and the README's snippet loads and scores it.
"$BIN/worker/export_model" --coordinator="$GRPC" --token_file="$WORK/token" \
  --run_id="$third_run" --out="$WORK/exported.pt" || fail "export_model failed"
same_model "$WORK/exported.pt" "$WORK/stopped.pt" || fail "the exported model is not the run's"
out=$(cd "$WORK" && /usr/bin/python3 load.py "$WORK/exported.pt") || fail "the snippet failed: $out"
grep -q "^run_id: \"$third_run\"" <<<"$out" || fail "the exported model is not run $third_run's: $out"
echo "PASS: export_model wrote run $third_run's model as TorchScript"

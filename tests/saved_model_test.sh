#!/usr/bin/env bash
# The trained model as a user gets it: a real Fashion-MNIST run saves it, and the README's
# Python snippet (run as written, nothing from this project imported) loads it with
# torch.jit.load, feeds it raw pixels and prints the test accuracy the worker reported.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "model-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token"
start_workers 2 1 --log_every=100000 --save_model="$WORK/model.pt"
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

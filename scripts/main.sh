#!/usr/bin/env bash
# README command (1): the main job, a real local Local SGD training run. Installs what is
# missing, builds, starts a coordinator and NODES x WORKERS worker processes on loopback,
# starts the run through the gRPC API, shows live progress, prints the final test accuracy,
# saves the trained model under runs/ and stops cleanly (also on Ctrl-C), leaving no process
# behind.
#
# Flags: --nodes=N (2) --workers_per_node=N (2) --spec=FILE (deploy/specs/demo.textproto)
#        --grpc_port=N (0: a free one) --http_port=N (0: a free one) --keep (leave the
#        coordinator up after the run, until Ctrl-C)
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=2
per_node=2
spec=deploy/specs/demo.textproto
grpc_port=0
http_port=0
keep=0
for arg in "$@"; do
  case "$arg" in
    --nodes=*) nodes="${arg#*=}" ;;
    --workers_per_node=*) per_node="${arg#*=}" ;;
    --spec=*) spec="${arg#*=}" ;;
    --grpc_port=*) grpc_port="${arg#*=}" ;;
    --http_port=*) http_port="${arg#*=}" ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "main.sh: unknown argument \"$arg\" (see --help)" >&2; exit 2 ;;
  esac
done
[[ -r "$spec" ]] || { echo "main.sh: --spec: cannot read $spec" >&2; exit 2; }

scripts/setup.sh
echo "== building (the first build takes a few minutes)"
bazel build -c opt //coordinator //coordinator:localsgdctl //worker 2>&1 | tail -n 1
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
# The Python package too (README.md, "From Accelerate"): `python3 -c "import localsgd"` works.
scripts/install_python.sh -c opt

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo; echo "== interrupted: stopping"; exit 130' INT TERM

out_dir="$PWD/runs/$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out_dir"
head -c 24 /dev/urandom | base64 > "$work/token"
"$bin/coordinator/coordinator" --grpc_address="127.0.0.1:$grpc_port" \
  --http_address="127.0.0.1:$http_port" --token_file="$work/token" --state_dir="$work/state" \
  > "$work/coordinator.out" 2> "$work/coordinator.log" &
pids+=($!)
for _ in $(seq 1 100); do
  grep -q '^http listening on ' "$work/coordinator.out" && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$work/coordinator.log" >&2; exit 1; }
  sleep 0.1
done
grpc_address=$(sed -n 's/^grpc listening on //p' "$work/coordinator.out")
http_address=$(sed -n 's/^http listening on //p' "$work/coordinator.out")
ctl() { "$bin/coordinator/localsgdctl" --coordinator="$grpc_address" --token_file="$work/token" "$@"; }
echo "== coordinator: gRPC $grpc_address; status page http://$http_address/ (JSON: /status, Prometheus: /metrics)"

workers=()
for ((n = 0; n < nodes; n++)); do
  for ((r = 0; r < per_node; r++)); do
    "$bin/worker/worker" --coordinator="$grpc_address" --token_file="$work/token" \
      --node_name="node-$n" --node_rank=$n --num_nodes="$nodes" --local_rank=$r \
      --local_world_size="$per_node" --rendezvous_dir="$work" --log_every=1000000 \
      --save_model="$out_dir/model.pt" \
      > "$work/worker-$n-$r.out" 2> "$work/worker-$n-$r.log" &
    pids+=($!)
    workers+=($!)
  done
done
echo "== $nodes nodes x $per_node workers started; starting the run ($spec) through the gRPC API"
ctl start --spec="$spec"
ctl watch --interval=2s --until_done || true
failed=0
for pid in "${workers[@]}"; do wait "$pid" || failed=1; done
echo "== final status"
ctl status
echo "== results"
cat "$work"/worker-*.out | grep ' done: ' || true
accuracy=$(cat "$work"/worker-*.out | grep ' done: ' | sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' | head -n 1)
echo "== final test accuracy: ${accuracy:-unknown}"
[[ -f "$out_dir/model.pt" ]] && echo "== trained model: $out_dir/model.pt"
if [[ $failed -ne 0 ]]; then
  echo "== a worker failed; its log:" >&2
  tail -n 20 "$work"/worker-*.log >&2
  exit 1
fi
if [[ $keep -eq 1 ]]; then
  echo "== coordinator still up at http://$http_address/ ; Ctrl-C to stop"
  wait "${pids[0]}"
fi

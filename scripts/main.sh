#!/usr/bin/env bash
# README command (1): the main job. Installs what is missing, builds, starts a coordinator on
# loopback, starts the demo run through the gRPC API and shows the coordinator's status, then
# keeps it running until Ctrl-C (or --for=SECONDS).
#
# Flags: --grpc_port=N (default 50051), --http_port=N (default 8080), --spec=FILE
# (default deploy/specs/demo.textproto), --for=SECONDS (default: until Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

grpc_port=50051
http_port=8080
spec=deploy/specs/demo.textproto
run_for=""
for arg in "$@"; do
  case "$arg" in
    --grpc_port=*) grpc_port="${arg#*=}" ;;
    --http_port=*) http_port="${arg#*=}" ;;
    --spec=*) spec="${arg#*=}" ;;
    --for=*) run_for="${arg#*=}" ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "main.sh: unknown argument \"$arg\" (see --help)" >&2; exit 2 ;;
  esac
done

scripts/setup.sh
bazel build //coordinator:coordinator //coordinator:localsgdctl
bin="$(bazel info bazel-bin)/coordinator"

work="$(mktemp -d)"
coordinator_pid=""
cleanup() {
  if [[ -n "$coordinator_pid" ]] && kill -0 "$coordinator_pid" 2>/dev/null; then
    kill -TERM "$coordinator_pid"
    wait "$coordinator_pid" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

head -c 24 /dev/urandom | base64 > "$work/token"
"$bin/coordinator" --grpc_address="127.0.0.1:$grpc_port" --http_address="127.0.0.1:$http_port" \
  --token_file="$work/token" --state_dir="$work/state" > "$work/coordinator.out" &
coordinator_pid=$!
for _ in $(seq 1 100); do
  grep -q '^http listening on ' "$work/coordinator.out" && break
  kill -0 "$coordinator_pid" 2>/dev/null || { echo "main.sh: the coordinator did not start" >&2; exit 1; }
  sleep 0.1
done
grpc_address=$(sed -n 's/^grpc listening on //p' "$work/coordinator.out")
http_address=$(sed -n 's/^http listening on //p' "$work/coordinator.out")
ctl() { "$bin/localsgdctl" --coordinator="$grpc_address" --token_file="$work/token" "$@"; }

echo "== coordinator: gRPC $grpc_address, status http://$http_address/"
echo "== localsgdctl start --spec=$spec"
ctl start --spec="$spec"
echo "== localsgdctl status"
ctl status
echo "== curl http://$http_address/status (first lines)"
curl -fsS "http://$http_address/status" | head -n 12
echo "== curl http://$http_address/metrics (run state)"
curl -fsS "http://$http_address/metrics" | grep '^localsgd_run_state'
echo "== The run waits for workers (the worker binary comes with a later issue)."
if [[ -n "$run_for" ]]; then
  echo "== Stopping in $run_for s."
  sleep "$run_for"
  ctl stop --reason="main.sh finished"
else
  echo "== Press Ctrl-C to stop the coordinator."
  wait "$coordinator_pid"
fi

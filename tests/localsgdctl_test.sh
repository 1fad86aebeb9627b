#!/usr/bin/env bash
# localsgdctl and the HTTP status endpoint against a real coordinator process: start, stop,
# status, watch, the auth rules as the CLI shows them, curl on /status, /metrics, /healthz,
# and a restart on the same state directory.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
CTL="$BIN/coordinator/localsgdctl"
WORK="$TEST_TMPDIR"
source "$BIN/tests/testutil/test_helpers.sh"
SPEC="$WORK/demo.textproto"
cat > "$SPEC" <<'EOF_SPEC'
name: "demo"
model { builtin: "mlp" }
local_sgd_steps: 8
gradient_accumulation_steps: 2
total_steps: 400
min_workers: 4
EOF_SPEC
echo -n "s3cret" > "$WORK/token"
expect_contains() { grep -qF -- "$2" <<<"$1" || fail "expected \"$2\" in: $1"; }
start_with_state_dir() {
  start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 \
    --token_file="$WORK/token" --state_dir="$WORK/state"
}

ctl() { "$CTL" --coordinator="$GRPC" "$@"; }

start_with_state_dir

out=$(ctl status)
expect_contains "$out" "no run (IDLE)"
expect_contains "$out" "no members"

# Auth: no token, wrong token.
if out=$(ctl start --spec="$SPEC" 2>&1); then fail "start without token succeeded"; fi
expect_contains "$out" "UNAUTHENTICATED"
if out=$(ctl --token=wrong start --spec="$SPEC" 2>&1); then fail "start with wrong token succeeded"; fi
expect_contains "$out" "PERMISSION_DENIED"

# Bad spec files name the problem.
echo 'model { builtin: "mlp" } local_sgd_steps: 0' > "$WORK/bad.textproto"
if out=$(ctl --token_file="$WORK/token" start --spec="$WORK/bad.textproto" 2>&1); then fail "bad spec accepted"; fi
expect_contains "$out" "INVALID_ARGUMENT: spec.local_sgd_steps"
echo 'model { builtin: "mlp" } local_sgd_stepz: 3' > "$WORK/typo.textproto"
if out=$(ctl --token_file="$WORK/token" start --spec="$WORK/typo.textproto" 2>&1); then fail "typo spec accepted"; fi
expect_contains "$out" "typo.textproto: run spec text: line 1"
if out=$(ctl --token_file="$WORK/token" start --spec="$WORK/missing" 2>&1); then fail "missing spec accepted"; fi
expect_contains "$out" "NOT_FOUND"

out=$(ctl --token_file="$WORK/token" start --spec="$SPEC")
expect_contains "$out" "started run-"
expect_contains "$out" "(demo) WAITING_FOR_WORKERS"
run_id=$(sed -n 's/^started \(run-[^ ]*\).*/\1/p' <<<"$out")

if out=$(ctl --token_file="$WORK/token" start --spec="$SPEC" 2>&1); then fail "second start succeeded"; fi
# start --if_absent: the same spec already active is fine (a start job run again, a requeued
# batch job); another spec is not.
out=$(ctl --token_file="$WORK/token" start --if_absent --spec="$SPEC")
expect_contains "$out" "already active: $run_id"
sed 's/local_sgd_steps: 8/local_sgd_steps: 16/' "$SPEC" > "$WORK/other.textproto"
rc=0; out=$(ctl --token_file="$WORK/token" start --if_absent --spec="$WORK/other.textproto" 2>&1) || rc=$?
[[ $rc == 1 ]] || fail "start --if_absent of another spec: exit $rc: $out"
expect_contains "$out" "is active with another spec"
expect_contains "$out" "FAILED_PRECONDITION"
# --min_workers replaces the spec's (a Kubernetes start job: nodes x GPUs per node): the same
# value is the same spec, another is another; a negative one is a usage error.
out=$(ctl --token_file="$WORK/token" start --if_absent --spec="$SPEC" --min_workers=4)
expect_contains "$out" "already active: $run_id"
rc=0; out=$(ctl --token_file="$WORK/token" start --if_absent --spec="$SPEC" --min_workers=6 2>&1) || rc=$?
[[ $rc == 1 ]] || fail "start --min_workers=6 of a min_workers 4 run: exit $rc: $out"
expect_contains "$out" "is active with another spec"
rc=0; out=$(ctl --token_file="$WORK/token" start --spec="$SPEC" --min_workers=-1 2>&1) || rc=$?
[[ $rc == 2 ]] || fail "--min_workers=-1: exit $rc: $out"
expect_contains "$out" "--min_workers"

out=$(ctl status)
expect_contains "$out" "$run_id (demo) WAITING_FOR_WORKERS round 0 step 0/400"
expect_contains "$out" "local_sgd_steps 8, gradient_accumulation_steps 2"
out=$(ctl status --json)
expect_contains "$out" "\"run_id\": \"$run_id\""

# The HTTP endpoint over a real socket.
out=$(curl -fsS "http://$HTTP/status")
expect_contains "$out" "\"state\": \"RUN_STATE_WAITING_FOR_WORKERS\""
out=$(curl -fsS "http://$HTTP/metrics")
expect_contains "$out" 'localsgd_run_state{state="WAITING_FOR_WORKERS"} 1'
[[ "$(curl -fsS "http://$HTTP/healthz")" == "ok" ]] || fail "healthz"
code=$(curl -s -o /dev/null -w '%{http_code}' -d '{}' "http://$HTTP/status")
[[ "$code" == "405" ]] || fail "POST /status answered $code"

# watch --until_done ends when the run is stopped (exit 1: not COMPLETED).
ctl watch --interval=0.05s --until_done >"$WORK/watch.out" 2>&1 &
watch_pid=$!
pids+=("$watch_pid")
for _ in $(seq 1 100); do grep -q WAITING_FOR_WORKERS "$WORK/watch.out" && break; sleep 0.1; done
out=$(ctl --token_file="$WORK/token" stop --reason="test over")
expect_contains "$out" "stopped $run_id (demo) STOPPED"
watch_rc=0
wait "$watch_pid" || watch_rc=$?
[[ "$watch_rc" == "1" ]] || fail "watch exited $watch_rc: $(cat "$WORK/watch.out")"
expect_contains "$(cat "$WORK/watch.out")" "STOPPED round 0 step 0/400 — test over"
expect_contains "$(cat "$WORK/watch.out")" "| 0.0% (0/400), elapsed"

# The run history: the stopped run, and a second one newest first; over HTTP too.
ctl --token_file="$WORK/token" start --spec="$SPEC" >/dev/null
out=$(ctl runs)
expect_contains "$out" "STATE"
[[ $(grep -c "demo" <<<"$out") == 2 ]] || fail "runs does not list both runs: $out"
expect_contains "$(sed -n 3p <<<"$out")" "$run_id"
expect_contains "$(sed -n 3p <<<"$out")" "test over"
out=$(curl -fsS "http://$HTTP/runs/$run_id")
expect_contains "$out" "\"state\": \"RUN_STATE_STOPPED\""
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$HTTP/runs/no-such-run/series")
[[ "$code" == "404" ]] || fail "series of an unknown run answered $code"
ctl --token_file="$WORK/token" stop >/dev/null

# Usage errors exit 2; --help exits 0 and shows the TLS flags.
rc=0; out=$(ctl 2>&1) || rc=$?
[[ $rc == 2 ]] || fail "no command: exit $rc"
expect_contains "$out" "missing COMMAND"
rc=0; out=$(ctl frobnicate 2>&1) || rc=$?
[[ $rc == 2 ]] || fail "unknown command: exit $rc"
expect_contains "$out" "unknown command"
rc=0; out=$(ctl --no_such_flag status 2>&1) || rc=$?
[[ $rc == 2 ]] || fail "unknown flag: exit $rc: $out"
rc=0; out=$(ctl --help 2>&1) || rc=$?
[[ $rc == 0 ]] || fail "--help: exit $rc"
expect_contains "$out" "--tls_ca"
[[ "$out" != *"localsgdctl: localsgdctl"* ]] || fail "--help repeats the program name: $out"
# A coordinator other hosts can reach is refused without a token, unless --insecure.
rc=0; out=$("$BIN/coordinator/coordinator" --grpc_address=0.0.0.0:0 --http_address= 2>&1) || rc=$?
[[ $rc == 2 ]] || fail "a token-less coordinator on 0.0.0.0: exit $rc"
expect_contains "$out" "give --token_file (or --insecure"
"$BIN/coordinator/coordinator" --grpc_address=0.0.0.0:0 --http_address= --insecure \
  >"$WORK/insecure.out" 2>&1 &
insecure=$!
for _ in $(seq 1 100); do grep -q "grpc listening" "$WORK/insecure.out" && break; sleep 0.1; done
grep -q "grpc listening" "$WORK/insecure.out" || fail "--insecure did not start: $(cat "$WORK/insecure.out")"
kill -TERM "$insecure"
wait "$insecure"
# A coordinator that is not there: what to check.
rc=0; out=$("$BIN/coordinator/localsgdctl" --coordinator=127.0.0.1:1 status 2>&1) || rc=$?
[[ $rc == 1 ]] || fail "unreachable coordinator: exit $rc"
expect_contains "$out" "check --coordinator"

# SIGTERM, then a restart on the same state dir shows the same run.
kill -TERM "$coord_pid"
wait "$coord_pid"
expect_contains "$(cat "$WORK/coord.err")" "coordinator stopped"
start_with_state_dir
out=$(ctl status)
expect_contains "$out" "(demo) STOPPED"
[[ $(ctl runs | grep -c "demo") == 2 ]] || fail "the run history did not survive the restart"
kill -TERM "$coord_pid"
wait "$coord_pid"
echo "PASS"

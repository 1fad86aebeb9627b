#!/usr/bin/env bash
# TLS and mutual TLS with real processes and certificates made by openssl: with mutual TLS a
# client without a certificate, with one from another CA or in plaintext is refused (worker
# and localsgdctl both), and workers with valid certificates train a run to completion; with
# server-only TLS a plaintext client or one that does not trust the server is refused.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "tls-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"
C="$WORK/certs"
bash "$BIN/tests/testutil/make_certs.sh" "$C"

ctl() { "$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" --timeout=5s "$@"; }
good=(--tls_ca="$C/ca.pem" --tls_cert="$C/client.pem" --tls_key="$C/client.key")

# Mutual TLS.
start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token" \
  --tls_cert="$C/server.pem" --tls_key="$C/server.key" --tls_client_ca="$C/ca.pem"
ctl "${good[@]}" status | grep -q "IDLE" || fail "a client with a valid certificate was refused"
expect_status 's["transport_security"] == "mutual TLS" and s["token_required"]' "not in mutual TLS"
for bad in "" "--tls_ca=$C/ca.pem" \
           "--tls_ca=$C/ca.pem --tls_cert=$C/rogue-client.pem --tls_key=$C/rogue-client.key"; do
  # shellcheck disable=SC2086
  if ctl $bad status >"$WORK/ctl.out" 2>&1; then fail "localsgdctl got in with [$bad]"; fi
  grep -q "UNAVAILABLE" "$WORK/ctl.out" || fail "unexpected error for [$bad]: $(cat "$WORK/ctl.out")"
done
if "$BIN/worker/worker" --coordinator="$GRPC" --token_file="$WORK/token" --node_name=intruder \
     --tls_ca="$C/ca.pem" --connect_timeout=2s >"$WORK/intruder.log" 2>&1; then
  fail "a worker without a client certificate joined"
fi
grep -q "join $GRPC: .*" "$WORK/intruder.log" || fail "no clear error: $(cat "$WORK/intruder.log")"
expect_status 'not [m for m in members if m.startswith("intruder")]' "the intruder is a member"

workers=()
for node in 0 1; do
  "$BIN/worker/worker" --coordinator="$GRPC" --token_file="$WORK/token" --node_name="node-$node" \
    --node_rank=$node --num_nodes=2 --rendezvous_dir="$WORK" "${good[@]}" \
    --data_address=127.0.0.1:0 --data_tls_cert="$C/server.pem" --data_tls_key="$C/server.key" \
    >"$WORK/w$node.out" 2>"$WORK/w$node.err" &
  pids+=($!)
  workers+=($!)
done
cat > "$WORK/spec.textproto" <<SPEC
model { builtin: "mlp" }
dataset { synthetic_samples: 1024 }
local_sgd_steps: 4
total_steps: 24
min_workers: 2
SPEC
ctl "${good[@]}" start --spec="$WORK/spec.textproto" >/dev/null
for p in "${workers[@]}"; do wait "$p" || fail "worker $p failed"; done
expect_status 'run["state"] == "RUN_STATE_COMPLETED" and run["round"] == 6' \
  "run not completed over mutual TLS"
# Every round was sharded: the node leaders' data planes served each other over mutual TLS.
expect_status 'len(committed) == 6 and all(r["exchange"] == "EXCHANGE_SHARDED" and r["shards"]
                                           for r in committed)' "the rounds were not sharded"
kill "$coord_pid"
wait "$coord_pid" || true

# Server-only TLS.
start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 \
  --tls_cert="$C/server.pem" --tls_key="$C/server.key"
expect_status 's["transport_security"] == "TLS" and not s["token_required"]' "not in TLS"
ctl --tls_ca="$C/ca.pem" status | grep -q "IDLE" || fail "a TLS client was refused"
if ctl status >/dev/null 2>&1; then fail "a plaintext client got in"; fi
if ctl --tls_ca="$C/rogue-ca.pem" status >/dev/null 2>&1; then
  fail "a client that does not trust the server's CA connected"
fi
# Flag mistakes are named before anything binds a port: here the port is taken (by the
# coordinator above), and the flag is still what is said (issue 49).
if "$BIN/coordinator/coordinator" --grpc_address="$GRPC" --http_address= \
  --tls_cert="$C/server.pem" 2>"$WORK/flag.err"; then
  fail "--tls_cert without --tls_key accepted"
fi
grep -q -- "--tls_key: required with --tls_cert" "$WORK/flag.err" || fail "$(cat "$WORK/flag.err")"
echo PASS

#!/usr/bin/env bash
# Several hosts on one machine: network namespaces PREFIX-h0 .. PREFIX-h{N-1}, each with one
# interface (eth0, 10.77.0.{i+1}/24) joined through a bridge in PREFIX-sw by veth pairs, every
# link shaped with tc tbf to RATE (both directions), and optionally a round trip: DELAY is held
# at each host's ingress by a delay line (the `delay_line` program, NFQUEUE), so the round trip
# between hosts i and j is DELAY_i + DELAY_j. Needs root and iptables.
#
#   deploy/netns/hosts.sh up PREFIX N RATE [DELAY]   # e.g. up lsgd 3 100mbit 25ms
#       DELAY: one for every host (25ms: 50 ms round trips), or one per host, comma-separated
#       (2.5ms,2.5ms,2.5ms,97.5ms: three hosts 5 ms apart and one 100 ms from each); in ms.
#       TUNED_TCP=1 in the environment: each host's TCP tuned for long fat pipes as
#       docs/design.md ("Limits", long fat pipes) recommends: net.ipv4.tcp_wmem's maximum 32 MiB (the kernel's
#       default, 4 MiB, bounds one connection to 4 MiB per round trip) and no slow start after
#       an idle moment (net.ipv4.tcp_slow_start_after_idle=0); both are per namespace.
#   ip netns exec PREFIX-h0 COMMAND ...                # host i has address 10.77.0.{i+1}
#   deploy/netns/hosts.sh down PREFIX N                # ends every process in the hosts too
#
# The delay line is found at $DELAY_LINE, else beside this folder (Bazel's runfiles, where
# //deploy:netns puts it), else in bazel-bin/deploy/ (build it: bazel build //deploy:delay_line).
set -euo pipefail
action=${1:?up or down}
prefix=${2:?prefix}
hosts=${3:?number of hosts}
state="/run/localsgd-netns/$prefix"

down() {
  local namespaces=("$prefix-sw")
  for ((i = 0; i < hosts; i++)); do namespaces+=("$prefix-h$i"); done
  # Whatever still runs in a host (delay lines, programs a caller started there) ends with it.
  local pids
  for signal in TERM KILL; do
    pids=$(for ns in "${namespaces[@]}"; do ip netns pids "$ns" 2>/dev/null || true; done)
    [[ -z "$pids" ]] && break
    kill -s "$signal" $pids 2>/dev/null || true
    for ((t = 0; t < 50; t++)); do
      kill -0 $pids 2>/dev/null || break
      sleep 0.1
    done
  done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$state"
}
if [[ "$action" == down ]]; then down; exit 0; fi

rate=${4:?rate, e.g. 100mbit}
IFS=, read -r -a delays <<<"${5:-}"
if ((${#delays[@]} == 1)); then
  for ((i = 1; i < hosts; i++)); do delays+=("${delays[0]}"); done
elif ((${#delays[@]} != 0 && ${#delays[@]} != hosts)); then
  echo "hosts.sh: DELAY has ${#delays[@]} values for $hosts hosts" >&2
  exit 2
fi
delay_ms=()
for d in "${delays[@]}"; do
  [[ "$d" =~ ^([0-9]+(\.[0-9]+)?)(ms)?$ ]] || { echo "hosts.sh: DELAY: $d is not like 25ms" >&2; exit 2; }
  delay_ms+=("${BASH_REMATCH[1]}")
done
delay_line=${DELAY_LINE:-}
if ((${#delay_ms[@]})); then
  here=$(dirname "${BASH_SOURCE[0]}")
  for candidate in "$delay_line" "$here/../delay_line" bazel-bin/deploy/delay_line; do
    [[ -n "$candidate" && -x "$candidate" ]] && { delay_line=$candidate; break; }
  done
  [[ -x "$delay_line" ]] || { echo "hosts.sh: no delay_line (bazel build //deploy:delay_line)" >&2; exit 2; }
  command -v iptables >/dev/null || { echo "hosts.sh: a DELAY needs iptables" >&2; exit 2; }
fi

down
mkdir -p "$state"
ip netns add "$prefix-sw"
ip -n "$prefix-sw" link set lo up
ip -n "$prefix-sw" link add br0 type bridge
ip -n "$prefix-sw" link set br0 up
# The bucket holds 256 KiB: tbf splits every packet longer than its bucket into MTU-sized ones,
# and TCP hands the veth 64 KiB segments (TSO), which with their headers are longer than 64 KiB.
# With a 64 KiB bucket every link carried 1.5 KB packets, and 9 namespaces on 2 cores spent most
# of their CPU in the kernel's per-packet work (a real NIC segments in hardware); with 256 KiB
# the packets stay 10-25 KB. A bucket lets at most its size through above the rate after an
# idle moment: 256 KiB is 10 ms at 200 Mbit/s.
shape() {  # namespace, interface
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 50ms
}
# Holds every packet that reaches host i for its delay: the delay line binds queue 0 of the
# host's namespace, and only once it holds it does the iptables rule send packets there.
hold_ingress() {  # host index, milliseconds
  local ns="$prefix-h$1" ready="$state/h$1.pid"
  ip netns exec "$ns" setsid "$delay_line" --queue=0 --delay_ms="$2" --ready_file="$ready" \
    </dev/null >"$state/h$1.log" 2>&1 &
  for ((t = 0; t < 100; t++)); do
    [[ -s "$ready" ]] && break
    kill -0 $! 2>/dev/null || { cat "$state/h$1.log" >&2; return 1; }
    sleep 0.05
  done
  [[ -s "$ready" ]] || { echo "hosts.sh: the delay line of $ns did not start" >&2; return 1; }
  ip netns exec "$ns" iptables -w -A INPUT -i eth0 -j NFQUEUE --queue-num 0
}
for ((i = 0; i < hosts; i++)); do
  ns="$prefix-h$i"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "${prefix}v$i" type veth peer name "${prefix}p$i"
  ip link set "${prefix}v$i" netns "$ns"
  ip link set "${prefix}p$i" netns "$prefix-sw"
  ip -n "$ns" link set "${prefix}v$i" name eth0
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  if [[ "${TUNED_TCP:-0}" == 1 ]]; then
    read -r wmem_min wmem_default _ < <(ip netns exec "$ns" sysctl -n net.ipv4.tcp_wmem)
    ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_wmem="$wmem_min $wmem_default 33554432" \
      net.ipv4.tcp_slow_start_after_idle=0
  fi
  ip -n "$prefix-sw" link set "${prefix}p$i" master br0
  ip -n "$prefix-sw" link set "${prefix}p$i" up
  shape "$ns" eth0                 # host -> switch
  shape "$prefix-sw" "${prefix}p$i"  # switch -> host
  if ((${#delay_ms[@]})) && [[ "${delay_ms[i]}" != 0 ]]; then
    hold_ingress "$i" "${delay_ms[i]}" || { down; exit 1; }
  fi
done

#!/usr/bin/env bash
# Several hosts on one machine: network namespaces PREFIX-h0 .. PREFIX-h{N-1}, each with one
# interface (eth0, 10.77.0.{i+1}/24) joined through a bridge in PREFIX-sw by veth pairs, every
# link shaped with tc tbf to RATE (both directions) plus an optional netem DELAY (needs the
# sch_netem kernel module, which some kernels lack). Needs root.
#
#   deploy/netns/hosts.sh up PREFIX N RATE [DELAY]   # e.g. up lsgd 3 100mbit 1ms
#   ip netns exec PREFIX-h0 COMMAND ...                # host i has address 10.77.0.{i+1}
#   deploy/netns/hosts.sh down PREFIX N
set -euo pipefail
action=${1:?up or down}
prefix=${2:?prefix}
hosts=${3:?number of hosts}

down() {
  for ((i = 0; i < hosts; i++)); do ip netns del "$prefix-h$i" 2>/dev/null || true; done
  ip netns del "$prefix-sw" 2>/dev/null || true
}
if [[ "$action" == down ]]; then down; exit 0; fi

rate=${4:?rate, e.g. 100mbit}
delay=${5:-}
down
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
shape() {  # namespace, interface: tbf at the rate (and netem delay first, if asked)
  local ns=$1 dev=$2
  if [[ -n "$delay" ]]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$delay"
    ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst 256kb latency 50ms
  else
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 50ms
  fi
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
  ip -n "$prefix-sw" link set "${prefix}p$i" master br0
  ip -n "$prefix-sw" link set "${prefix}p$i" up
  shape "$ns" eth0                 # host -> switch
  shape "$prefix-sw" "${prefix}p$i"  # switch -> host
done

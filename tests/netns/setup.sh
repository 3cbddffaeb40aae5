#!/usr/bin/env bash
# Multi-host test bed on one machine: N network namespaces ("hosts") joined by a bridge.
#
#   tests/netns/setup.sh [N] [--delay D]    N = 2..4 namespaces (default 2)
#
# Namespace i is ${FERRY_NETNS_PREFIX:-ferry-ns}i with interface eth0 = ${FERRY_NETNS_NET:-10.231.0}.i/24
# and loopback up; the bridge ${FERRY_NETNS_BRIDGE:-ferrybr0} in the calling namespace joins them
# and has no address, so traffic stays between the namespaces. With --delay D (e.g. 20ms) every
# eth0 gets `tc netem delay D` (needs the sch_netem kernel module): the round trip between two
# namespaces is then 2*D.
#
# Exit status: 0 ready; 2 usage or not root; 3 netem unavailable (the namespaces are removed
# again); 1 anything else. Re-running it first removes an old test bed of the same prefix.
# Remove with tests/netns/teardown.sh; run commands inside with tests/netns/exec.sh.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
prefix="${FERRY_NETNS_PREFIX:-ferry-ns}"
bridge="${FERRY_NETNS_BRIDGE:-ferrybr0}"
net="${FERRY_NETNS_NET:-10.231.0}"

n=2
delay=""
while [ $# -gt 0 ]; do
  case "$1" in
    --delay) delay="${2:?--delay needs a value such as 20ms}"; shift 2 ;;
    [0-9]*) n="$1"; shift ;;
    *) echo "usage: $0 [N] [--delay D]" >&2; exit 2 ;;
  esac
done
if [ "$n" -lt 2 ] || [ "$n" -gt 4 ]; then
  echo "setup.sh: N must be 2..4, not $n" >&2
  exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: creating network namespaces needs root" >&2
  exit 2
fi
command -v ip >/dev/null || { echo "setup.sh: needs iproute2 (ip)" >&2; exit 2; }

"$here/teardown.sh" >/dev/null 2>&1 || true

ip link add "$bridge" type bridge
ip link set "$bridge" up
for i in $(seq 1 "$n"); do
  ns="$prefix$i"
  host_end="${bridge}p$i"
  ip netns add "$ns"
  ip link add "$host_end" type veth peer name eth0 netns "$ns"
  ip link set "$host_end" master "$bridge"
  ip link set "$host_end" up
  ip -n "$ns" addr add "$net.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  if [ -n "$delay" ]; then
    if ! tc -n "$ns" qdisc add dev eth0 root netem delay "$delay" 2>/dev/null; then
      echo "setup.sh: tc netem is unavailable here (no sch_netem kernel module?)" >&2
      "$here/teardown.sh" >/dev/null 2>&1 || true
      exit 3
    fi
  fi
done

# Wait until every namespace's eth0 can carry traffic (the bridge ports start in "listening"
# only with STP, which is off, but links take a moment to come up).
for i in $(seq 1 "$n"); do
  for _ in $(seq 1 50); do
    if ip -n "$prefix$i" link show eth0 | grep -q "state UP"; then
      break
    fi
    sleep 0.1
  done
done
echo "setup.sh: $n namespaces ${prefix}1..${prefix}$n on $net.0/24${delay:+ with netem delay $delay}"

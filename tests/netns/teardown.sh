#!/usr/bin/env bash
# Removes the test bed made by tests/netns/setup.sh (same FERRY_NETNS_PREFIX/_BRIDGE).
# Processes still running inside the test namespaces are test processes: they are killed first,
# because a namespace with running processes would live on after `ip netns del`.
set -uo pipefail
prefix="${FERRY_NETNS_PREFIX:-ferry-ns}"
bridge="${FERRY_NETNS_BRIDGE:-ferrybr0}"
status=0
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}[0-9]+$"); do
  for pid in $(ip netns pids "$ns" 2>/dev/null); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  ip netns del "$ns" || status=1
done
# Deleting a namespace deletes its veth end and with it the bridge port.
if ip link show "$bridge" >/dev/null 2>&1; then
  ip link del "$bridge" || status=1
fi
exit $status

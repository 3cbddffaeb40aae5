#!/usr/bin/env bash
# Removes the test bed made by tests/netns/setup.sh (same FERRY_NETNS_PREFIX/_BRIDGE).
# Processes still running inside the test namespaces are test processes: they are killed first,
# because a namespace with running processes would live on after `ip netns del`.
set -uo pipefail
prefix="${FERRY_NETNS_PREFIX:-ferry-ns}"
bridge="${FERRY_NETNS_BRIDGE:-ferrybr0}"
status=0
# Host ends of the veth pairs first: deleting one end removes the pair at once, while a deleted
# namespace's own end (and with it this one) goes only when the kernel has finished tearing the
# namespace down, which can lag under load and make the next setup fail with "File exists".
for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${bridge}p[0-9]+$"); do
  ip link del "$link" || status=1
done
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

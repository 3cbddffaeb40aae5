#!/usr/bin/env bash
# Runs a command inside one namespace of the test bed, as one "host":
#
#   tests/netns/exec.sh NS COMMAND [ARGS]...
#
# Sets FERRY_TCP_BIND to the namespace's eth0 address (so the TCP backend listens on, and
# publishes, an address the other namespaces reach) and FERRY_NODE to the namespace name (all
# namespaces share the machine's host name, which would otherwise merge them into one node).
# Usable as the launcher's remote command: ferry run --hosts ferry-ns1,ferry-ns2 \
#   --remote-cmd 'tests/netns/exec.sh {host} {cmd}' ...
set -euo pipefail
ns="${1:?usage: exec.sh NS COMMAND [ARGS]...}"
shift
addr="$(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1 | head -n1)"
if [ -z "$addr" ]; then
  echo "exec.sh: namespace $ns has no IPv4 address on eth0 (run tests/netns/setup.sh)" >&2
  exit 2
fi
exec ip netns exec "$ns" env FERRY_TCP_BIND="$addr" FERRY_NODE="$ns" "$@"

#!/usr/bin/env bash
# Starts a cluster-mode Redis of three masters (no replicas) on 127.0.0.1, for the cluster tests
# and the Redis bench: `tests/lib/redis-cluster.sh DIR [PORT1 PORT2 PORT3]` (without ports it picks
# three whose cluster bus ports, port + 10000, are free too). Each server runs
# daemonized with its pid file, log and cluster config in DIR; the script waits until the cluster
# reports `cluster_state:ok` on every node and prints the seed URL (redis://127.0.0.1:PORT1/).
# Stop it with `kill $(cat DIR/*.pid)`.
set -euo pipefail
if [ $# -ne 4 ] && [ $# -ne 1 ]; then
  echo "usage: $0 DIR [PORT1 PORT2 PORT3]" >&2
  exit 2
fi
dir=$1
shift
if [ $# -eq 0 ]; then
  # shellcheck disable=SC2046 # three numbers
  set -- $(python3 - <<'PY'
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
ports = []
while len(ports) < 3:
    p = random.randrange(20000, 45000)
    if p not in ports and free(p) and free(p + 10000):
        ports.append(p)
print(*ports)
PY
)
fi
mkdir -p "$dir"
for port in "$@"; do
  rm -f "$dir/nodes-$port.conf"
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
    --cluster-enabled yes --cluster-config-file "$dir/nodes-$port.conf" \
    --cluster-node-timeout 5000 --dir "$dir" \
    --daemonize yes --pidfile "$dir/redis-$port.pid" --logfile "$dir/redis-$port.log"
done
for port in "$@"; do
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
nodes=()
for port in "$@"; do nodes+=("127.0.0.1:$port"); done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 || {
  cat "$dir/create.log" >&2
  exit 1
}
for port in "$@"; do
  ok=
  for _ in $(seq 100); do
    if redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then ok=1; break; fi
    sleep 0.1
  done
  if [ -z "$ok" ]; then
    echo "cluster node 127.0.0.1:$port did not reach cluster_state:ok" >&2
    exit 1
  fi
done
echo "redis://127.0.0.1:$1/"

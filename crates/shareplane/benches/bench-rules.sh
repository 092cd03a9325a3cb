#!/usr/bin/env bash
# Load benchmark of the daemon's rule-set endpoint (not part of the test suite; prints figures,
# asserts nothing). Builds the release binary, runs `shareplane run` on the in-memory store on a
# loopback port, then:
#   1. wrk against GET /v1/rules: requests/s and latency percentiles (p99);
#   2. 1,000 concurrent long-polls (GET /v1/rules?after=V&wait_ms=30000) held open at once,
#      printing the daemon's resident memory before and while they are held.
# Needs wrk (Debian: apt-get install wrk) and python3. Usage: crates/shareplane/benches/bench-rules.sh
# (on a busy shared machine, `nice -n -10 crates/shareplane/benches/bench-rules.sh` keeps other
# work from dominating the tail latency; the script prints the load average it ran under).
# Environment: DURATION (default 15s), CONNECTIONS (default 8), THREADS (wrk threads, default 1),
# WORKERS (the daemon's tokio worker threads, default 1: wrk needs the other core), POLLS (1000).
set -euo pipefail
cd "$(dirname "$0")/../../.."
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-8}
THREADS=${THREADS:-1}
POLLS=${POLLS:-1000}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }

cargo build --release -p shareplane --locked 2>&1 | tail -1
BIN=$PWD/target/release/shareplane
WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$WORK/config.toml" <<TOML
region = "local"
store = "memory"
listen = "127.0.0.1:$PORT"
[[regions]]
name = "local"
[[limits]]
id = "k-big"
rate = 10000
TOML
ulimit -n 8192
TOKIO_WORKER_THREADS=${WORKERS:-1} SHAREPLANE_API_TOKEN=bench-token-0123456789 RUST_LOG=warn "$BIN" run --config "$WORK/config.toml" 2>"$WORK/daemon.log" &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
URL="http://127.0.0.1:$PORT"
for _ in $(seq 100); do curl -fs "$URL/v1/rules" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fs "$URL/v1/rules" >/dev/null || { echo "daemon did not publish a rule set" >&2; cat "$WORK/daemon.log" >&2; exit 1; }
rss() { awk '/VmRSS/ {print $2/1024 " MiB"}' "/proc/$PID/status"; }

echo "load average: $(cut -d" " -f1-3 /proc/loadavg) (other work on the machine skews the figures)"
echo "== GET /v1/rules: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency (daemon and wrk share $(nproc) cores)"
wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$URL/v1/rules" | tee "$WORK/wrk.txt"
echo "requests/s: $(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.txt")"
echo "p99 latency: $(awk '$1=="99%" {print $2}' "$WORK/wrk.txt")"

echo "== $POLLS concurrent long-polls"
echo "daemon RSS before: $(rss)"
VERSION=$(curl -fs "$URL/v1/rules" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
python3 - "$PORT" "$VERSION" "$POLLS" "$PID" <<'PY'
import asyncio, re, sys, time, urllib.request
port, version, n, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def rss_mib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")

def watchers():
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    m = re.search(r"^shareplane_rule_watchers\{[^}]*\} (\d+)", text, re.M)
    return int(m.group(1)) if m else -1

async def main():
    conns = []
    req = f"GET /v1/rules?after={version}&wait_ms=30000 HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    for _ in range(n):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(req)
        conns.append((r, w))
    await asyncio.gather(*(w.drain() for _, w in conns))
    deadline = time.time() + 20
    held = watchers()
    while held < n and time.time() < deadline:
        await asyncio.sleep(0.2)
        held = await asyncio.to_thread(watchers)
    print(f"long-polls held by the daemon: {held} of {n}")
    print(f"daemon RSS while holding them: {rss_mib():.1f} MiB")
    for _, w in conns:
        w.close()

asyncio.run(main())
PY
kill -TERM $PID
wait $PID 2>/dev/null || true
echo "daemon stopped"

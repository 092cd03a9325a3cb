#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need (Redis from Debian,
# moto's server from PyPI, Chromium for the dashboard test, npm packages and linters for infra/),
# starts the local servers on 127.0.0.1, runs every test, and stops the servers again.
#
# Nothing here reaches AWS: every AWS client gets an explicit 127.0.0.1 endpoint and test keys.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$ROOT/tests/.work
mkdir -p "$WORK"
export AWS_EC2_METADATA_DISABLED=true AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
export AWS_REGION=us-east-1 CDK_DISABLE_CLI_TELEMETRY=true
# Tests that need a local server fail (rather than skip) when it is missing.
export SHAREPLANE_REQUIRE_SERVICES=1

step() { printf '\n==> %s\n' "$*"; }
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ ${#missing[@]} -gt 0 ]; then
    step "installing Debian packages: ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

step "system packages"
apt_install redis-server

step "moto server (local DynamoDB and CloudWatch)"
if [ ! -x "$ROOT/.venv-moto/bin/moto_server" ]; then
  python3 -m venv "$ROOT/.venv-moto"
  "$ROOT/.venv-moto/bin/pip" install -q 'moto[server]'
fi
MOTO_PORT=$(free_port)
"$ROOT/.venv-moto/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"$WORK/moto.log" 2>&1 &
PIDS+=($!)
export SHAREPLANE_TEST_MOTO_URL="http://127.0.0.1:$MOTO_PORT"
for _ in $(seq 50); do curl -fs "$SHAREPLANE_TEST_MOTO_URL/moto-api/" >/dev/null 2>&1 && break; sleep 0.2; done

step "redis server"
REDIS_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
export SHAREPLANE_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/"
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.2; done

step "binaries the end-to-end tests start (tests/e2e)"
cargo build -p shareplane -p shareplane-limiter --bins --locked
export SHAREPLANE_E2E_REPORT="$WORK/e2e-three-regions.txt"
rm -f "$SHAREPLANE_E2E_REPORT"

step "cargo test (workspace)"
cargo test --workspace --locked 2>&1 | tee "$WORK/cargo-test.log"
step "end-to-end figures (tests/e2e, three Regions)"
cat "$SHAREPLANE_E2E_REPORT" || { echo "tests/e2e wrote no figures: did the end-to-end test run?" >&2; exit 1; }

step "dashboard in a headless browser (chromium + playwright-core)"
apt_install chromium
cargo build -p shareplane --locked
(cd tests/browser && npm ci --no-audit --no-fund --silent && timeout 300 node dashboard.test.mjs)

if [ -x infra/test.sh ]; then
  step "infra tests"
  infra/test.sh
fi

step "all tests passed"

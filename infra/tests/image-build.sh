#!/usr/bin/env bash
# Builds shareplane's two images from infra/Dockerfile with buildah, the daemon's (target
# `daemon`, the default) and the gateway's (target `gateway`), and runs them (`buildah run`,
# chroot isolation: podman's runtime needs cgroups this machine does not offer; the processes
# share this machine's network): each runs as 65532 with the Dockerfile's entrypoint and command;
# `shareplane --version`, `validate` of the example config in the daemon's; then the daemon's
# image serves a rule set (memory store) and the gateway's image, started with its default
# command on a mounted gateway.toml, loads it from there and says so on /metrics.
#
#   infra/tests/image-build.sh STAGED_CONTEXT_DIR BINARY
#
# BINARY is the shareplane binary this test run built once (tests/run-all.sh builds
# target/debug/shareplane; infra/test.sh checks it is newer than the sources the CDK asset
# stages, which are the repository's). The Dockerfile's `build` stage (a release `cargo build`:
# 22 of the 47 minutes of a clean CI run on 2 busy cores) is replaced by an image holding BINARY
# at /out/shareplane, where that stage installs it; everything from the Dockerfile's "runtime
# stages" line on is used as written (COPY --from=build, USER, EXPOSE, ENTRYPOINT, CMD). Not built
# here: the release profile and the rust:1.95-slim base. SHAREPLANE_IMAGE_FROM_SOURCE=1 builds the
# whole Dockerfile instead, as `docker build` would (a release build: minutes to an hour; not CI).
#
# The runtime base (distroless/cc-debian12 lives on a registry this machine cannot reach) is a
# local stand-in, built once per machine and kept in buildah's storage: glibc and libgcc from this
# (bookworm) machine, as distroless/cc-debian12 has them, the CA certificates, /etc/passwd with
# nonroot = 65532, and /tmp.
set -euo pipefail
CTX=$(cd "$1" && pwd)
BINARY=$2
STORAGE=(--storage-driver vfs)
RUNTIME_BASE=localhost/shareplane-test/runtime-base:bookworm
IMAGES=(daemon gateway)
T0=$SECONDS
WORK=$(mktemp -d /tmp/shareplane-image-test.XXXXXX)
say() { printf '    [image %3ds] %s\n' "$((SECONDS - T0))" "$*"; }
# shellcheck source=tests/lib/progress.sh
. "$(dirname "$0")/../../tests/lib/progress.sh"
have_image() { buildah "${STORAGE[@]}" inspect --type image "$1" >/dev/null 2>&1; }

runtime_base() {
  have_image "$RUNTIME_BASE" && return
  say "runtime base: glibc, libgcc, CA certificates, nonroot user (once per machine)"
  local rootfs c
  rootfs=$(mktemp -d /var/tmp/shareplane-runtime-base.XXXXXX)
  mkdir -p "$rootfs"/{etc/ssl/certs,lib/x86_64-linux-gnu,lib64,tmp,home/nonroot}
  chmod 1777 "$rootfs/tmp"
  for lib in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libgcc_s.so.1 ld-linux-x86-64.so.2; do
    cp -L "/lib/x86_64-linux-gnu/$lib" "$rootfs/lib/x86_64-linux-gnu/"
  done
  ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$rootfs/lib64/ld-linux-x86-64.so.2"
  cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
  chown 65532:65532 "$rootfs/home/nonroot"
  c=$(buildah "${STORAGE[@]}" from scratch)
  buildah "${STORAGE[@]}" copy --quiet "$c" "$rootfs" / >/dev/null
  buildah "${STORAGE[@]}" config --user 65532:65532 --workingdir /home/nonroot "$c"
  buildah "${STORAGE[@]}" commit --quiet --rm "$c" "$RUNTIME_BASE" >/dev/null
  rm -rf "$rootfs"
}

# Both runtime stages from BINARY: the Dockerfile below its "runtime stages" line, after a
# `build` stage that only puts the binary where the real one installs it.
from_binary() {
  grep -q '^# ---- runtime stages' "$CTX/infra/Dockerfile" || { echo "infra/Dockerfile has no runtime stages line" >&2; exit 1; }
  {
    grep '^ARG RUNTIME_IMAGE=' "$CTX/infra/Dockerfile"
    echo "FROM scratch AS build"
    echo "COPY shareplane /out/shareplane"
    sed -n '/^# ---- runtime stages/,$p' "$CTX/infra/Dockerfile"
  } >"$WORK/Dockerfile"
  mkdir -p "$WORK/context"
  cp "$BINARY" "$WORK/context/shareplane"
  chmod 0755 "$WORK/context/shareplane"
  for target in "${IMAGES[@]}"; do
    say "buildah bud --target $target (runtime stages of infra/Dockerfile, binary $(basename "$BINARY"), $(du -m "$BINARY" | cut -f1) MB)"
    buildah "${STORAGE[@]}" bud --quiet --isolation chroot --layers=false --target "$target" -f "$WORK/Dockerfile" \
      --build-arg RUNTIME_IMAGE="$RUNTIME_BASE" -t "localhost/shareplane-$target:test" "$WORK/context" >/dev/null
  done
}

# The whole Dockerfile, its release build included, as `docker build` runs it (opt-in).
from_source() {
  local build_base=localhost/shareplane-test/build-base:bookworm rootfs c target
  local cache=${SHAREPLANE_IMAGE_TARGET_CACHE:-/var/tmp/shareplane-image-target} cargo_home=${CARGO_HOME:-$HOME/.cargo}
  mkdir -p "$cache"
  if ! have_image "$build_base"; then
    rootfs=$(mktemp -d /var/tmp/shareplane-build-base.XXXXXX)
    long "debootstrap bookworm" debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates bookworm "$rootfs"
    c=$(buildah "${STORAGE[@]}" from scratch)
    buildah "${STORAGE[@]}" copy --quiet "$c" "$rootfs" / >/dev/null
    buildah "${STORAGE[@]}" config --env CARGO_HOME=/usr/local/cargo \
      --env PATH=/usr/local/rust/bin:/usr/local/cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
    buildah "${STORAGE[@]}" commit --quiet --rm "$c" "$build_base" >/dev/null
    rm -rf "$rootfs"
  fi
  for target in "${IMAGES[@]}"; do
    say "buildah bud --target $target of the whole Dockerfile (release build: minutes on 2 cores)"
    long "buildah bud --target $target" buildah "${STORAGE[@]}" bud --isolation chroot --layers=false --target "$target" \
      -f "$CTX/infra/Dockerfile" --build-arg RUST_IMAGE="$build_base" --build-arg RUNTIME_IMAGE="$RUNTIME_BASE" \
      --volume "$(rustc --print sysroot):/usr/local/rust:ro" --volume "$cargo_home/registry:/usr/local/cargo/registry" \
      --volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
      --volume "$cache:/src/target" -t "localhost/shareplane-$target:test" "$CTX"
  done
}

runtime_base
# This run's images replace the last run's (vfs keeps every layer in full: 85 MB an image).
for target in "${IMAGES[@]}"; do buildah "${STORAGE[@]}" rmi "localhost/shareplane-$target:test" >/dev/null 2>&1 || true; done
if [ "${SHAREPLANE_IMAGE_FROM_SOURCE:-0}" = 1 ]; then from_source; else from_binary; fi
say "images built: ${IMAGES[*]}"

inspect() { buildah "${STORAGE[@]}" inspect --type image --format "$2" "localhost/shareplane-$1:test"; }
expect() { [ "$2" = "$3" ] || { echo "the $1 image: expected $4 $3, found $2" >&2; exit 1; }; }
for target in "${IMAGES[@]}"; do
  expect "$target" "$(inspect "$target" '{{.OCIv1.Config.User}}')" "65532:65532" "user"
  expect "$target" "$(inspect "$target" '{{.OCIv1.Config.Entrypoint}}')" "[/usr/local/bin/shareplane]" "entrypoint"
done
expect daemon "$(inspect daemon '{{.OCIv1.Config.Cmd}}')" "[run --config /etc/shareplane/config.toml]" "command"
expect gateway "$(inspect gateway '{{.OCIv1.Config.Cmd}}')" "[gateway --config /etc/shareplane/gateway.toml]" "command"
# The daemon's allocator setting (README, "a daemon's resident memory"): freed records unmapped.
daemon_env=$(inspect daemon '{{.OCIv1.Config.Env}}')
case " ${daemon_env//[\[\]]/ } " in
  *" MALLOC_MMAP_THRESHOLD_=1048576 "*) ;;
  *) echo "the daemon image: expected MALLOC_MMAP_THRESHOLD_=1048576 in its environment, found $daemon_env" >&2; exit 1 ;;
esac

CONTAINERS=()
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  for p in "${CONTAINERS[@]}"; do buildah "${STORAGE[@]}" rm "$p" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
# A working container of image $1, in $c (not a subshell: CONTAINERS must see it).
container() {
  c=$(buildah "${STORAGE[@]}" from --quiet "localhost/shareplane-$1:test")
  CONTAINERS+=("$c")
}
run() { buildah "${STORAGE[@]}" run --isolation chroot "$@"; }
# `buildah run` needs the command spelled out: the image's own ENTRYPOINT and CMD, read back.
default_command() {
  buildah "${STORAGE[@]}" inspect --type image "localhost/shareplane-$1:test" |
    python3 -c 'import json, sys; c = json.load(sys.stdin)["OCIv1"]["config"]; print("\n".join(c["Entrypoint"] + c["Cmd"]))'
}

container daemon
d=$c
buildah "${STORAGE[@]}" config --env SHAREPLANE_API_TOKEN=image-test-token-0123456789 "$d"
version=$(run "$d" -- /usr/local/bin/shareplane --version)
echo "    shareplane --version in the daemon's image: $version"
[[ "$version" =~ ^shareplane\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "unexpected --version output: $version" >&2; exit 1; }
out=$(run -v "$CTX/crates/shareplane/config.example.toml:/etc/shareplane/config.toml:ro" "$d" -- \
  /usr/local/bin/shareplane validate /etc/shareplane/config.toml)
echo "    shareplane validate of the example config in the daemon's image: $out"
[[ "$out" == "configuration is valid"* ]] || { echo "validate failed in the image: $out" >&2; exit 1; }

# The two images together: the daemon's (its default command, memory store) publishes a rule
# set; the gateway's (its default command, gateway.toml mounted where the chart mounts it) loads it.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
DAEMON_PORT=$(free_port) REDIS_PORT=$(free_port) HTTP_PORT=$(free_port)
mkdir -p "$WORK/daemon" "$WORK/gateway"
printf 'region = "A"\nstore = "memory"\nperiod_ms = 1000\nlisten = "127.0.0.1:%s"\n[[regions]]\nname = "A"\n[[limits]]\nid = "k-image"\nrate = 100\n' \
  "$DAEMON_PORT" >"$WORK/daemon/config.toml"
printf 'rules = "http://127.0.0.1:%s"\nredis = "redis://127.0.0.1:%s/"\nhttp_listen = "127.0.0.1:%s"\n' \
  "$DAEMON_PORT" "$REDIS_PORT" "$HTTP_PORT" >"$WORK/gateway/gateway.toml"
chmod -R a+rX "$WORK"
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
mapfile -t daemon_cmd < <(default_command daemon)
mapfile -t gateway_cmd < <(default_command gateway)
# buildah itself in the background (not a function's subshell), so that its pid is the one killed:
# it passes the signal on to the process it runs.
buildah "${STORAGE[@]}" run --isolation chroot -v "$WORK/daemon:/etc/shareplane:ro" "$d" -- "${daemon_cmd[@]}" >"$WORK/daemon.log" 2>&1 &
PIDS+=($!)
container gateway
g=$c
buildah "${STORAGE[@]}" config --env SHAREPLANE_DEMAND_TOKEN=image-test-token-0123456789 "$g"
buildah "${STORAGE[@]}" run --isolation chroot -v "$WORK/gateway:/etc/shareplane:ro" "$g" -- "${gateway_cmd[@]}" >"$WORK/gateway.log" 2>&1 &
PIDS+=($!)
loaded=
for _ in $(seq 150); do
  loaded=$(curl -fs "http://127.0.0.1:$HTTP_PORT/metrics" 2>/dev/null | sed -n 's/^shareplane_gateway_rules_version \([1-9][0-9]*\)$/\1/p' || true)
  [ -n "$loaded" ] && break
  sleep 0.2
done
if [ -z "$loaded" ]; then
  echo "the gateway's image loaded no rule set from the daemon's image" >&2
  tail -n 20 "$WORK/daemon.log" "$WORK/gateway.log" >&2
  exit 1
fi
echo "    the gateway's image (default command) loaded rule set version $loaded from the daemon's image"
say "both images run as 65532:65532 with their entrypoints and commands; --version, validate and rules pass"

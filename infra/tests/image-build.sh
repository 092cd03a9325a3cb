#!/usr/bin/env bash
# Builds the daemon's image the way `cdk deploy` does (infra/Dockerfile, with the directory the
# CDK asset staged as the build context) with buildah, then runs it (`buildah run`, chroot
# isolation: podman's runtime needs cgroups this machine does not offer): `shareplane --version`
# and `shareplane validate` of the example config, as the image's user, which must be 65532.
#
#   infra/tests/image-build.sh STAGED_CONTEXT_DIR
#
# The Dockerfile's base images (rust:1.95-slim-bookworm, distroless/cc-debian12) live on
# registries this machine cannot reach, so they are replaced by local stand-ins, built once per
# machine and kept in buildah's storage:
#   - build base: Debian bookworm (debootstrap, from the Debian mirror) with gcc and libc6-dev,
#     which is what the rust slim image is, with this machine's Rust toolchain mounted read-only
#     at /usr/local/rust instead of rustup's copy of the same release, this machine's crate cache
#     as CARGO_HOME's registry (so `cargo fetch` has little or nothing to download) and its CA
#     bundle (which trusts the registry proxy, where there is one);
#   - runtime base: glibc and libgcc from this (bookworm) machine, as distroless/cc-debian12 has
#     them, the CA certificates, /etc/passwd with nonroot = 65532, and /tmp.
# Everything else is the real thing: the Dockerfile, its two stages, `cargo fetch --locked`, the
# release build with `--locked --offline`, COPY --from, USER, ENTRYPOINT and CMD. The build
# stage's target/ is a directory of this machine kept between runs (as a BuildKit cache mount
# would be), so that a run after the first compiles only what changed: a cold release build of
# the SDK takes minutes on 2 idle cores, and up to an hour on busy ones.
set -euo pipefail
CTX=$(cd "$1" && pwd)
STORAGE=(--storage-driver vfs)
BUILD_BASE=localhost/shareplane-test/build-base:bookworm
RUNTIME_BASE=localhost/shareplane-test/runtime-base:bookworm
IMAGE=localhost/shareplane:test
SYSROOT=$(rustc --print sysroot)
CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}
TARGET_CACHE=${SHAREPLANE_IMAGE_TARGET_CACHE:-/var/tmp/shareplane-image-target}
mkdir -p "$TARGET_CACHE"
T0=$SECONDS
say() { printf '    [image %3ds] %s\n' "$((SECONDS - T0))" "$*"; }
# shellcheck source=tests/lib/progress.sh
. "$(dirname "$0")/../../tests/lib/progress.sh"

have_image() { buildah "${STORAGE[@]}" inspect --type image "$1" >/dev/null 2>&1; }

if ! have_image "$BUILD_BASE"; then
  ROOTFS=$(mktemp -d /var/tmp/shareplane-build-base.XXXXXX)
  say "build base: debootstrap bookworm (minbase, gcc, libc6-dev) into $ROOTFS; a few minutes, once per machine"
  long "debootstrap bookworm" debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates bookworm "$ROOTFS"
  c=$(buildah "${STORAGE[@]}" from scratch)
  buildah "${STORAGE[@]}" copy --quiet "$c" "$ROOTFS" / >/dev/null
  buildah "${STORAGE[@]}" config --env CARGO_HOME=/usr/local/cargo \
    --env PATH=/usr/local/rust/bin:/usr/local/cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
  buildah "${STORAGE[@]}" commit --quiet --rm "$c" "$BUILD_BASE" >/dev/null
  rm -rf "$ROOTFS"
  say "build base ready"
fi

if ! have_image "$RUNTIME_BASE"; then
  say "runtime base: glibc, libgcc, CA certificates, nonroot user"
  ROOTFS=$(mktemp -d /var/tmp/shareplane-runtime-base.XXXXXX)
  mkdir -p "$ROOTFS"/{etc/ssl/certs,lib/x86_64-linux-gnu,lib64,tmp,home/nonroot}
  chmod 1777 "$ROOTFS/tmp"
  for lib in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libgcc_s.so.1 ld-linux-x86-64.so.2; do
    cp -L "/lib/x86_64-linux-gnu/$lib" "$ROOTFS/lib/x86_64-linux-gnu/"
  done
  ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$ROOTFS/lib64/ld-linux-x86-64.so.2"
  cp -L /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ROOTFS/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$ROOTFS/etc/group"
  chown 65532:65532 "$ROOTFS/home/nonroot"
  c=$(buildah "${STORAGE[@]}" from scratch)
  buildah "${STORAGE[@]}" copy --quiet "$c" "$ROOTFS" / >/dev/null
  buildah "${STORAGE[@]}" config --user 65532:65532 --workingdir /home/nonroot "$c"
  buildah "${STORAGE[@]}" commit --quiet --rm "$c" "$RUNTIME_BASE" >/dev/null
  rm -rf "$ROOTFS"
fi

say "buildah bud -f infra/Dockerfile on the staged context (release build: minutes on 2 cores)"
LOG=$(mktemp /tmp/shareplane-image-build.XXXXXX.log)
bud() {
  buildah "${STORAGE[@]}" bud --isolation chroot --layers=false --platform linux/amd64 \
    -f "$CTX/infra/Dockerfile" \
    --build-arg RUST_IMAGE="$BUILD_BASE" --build-arg RUNTIME_IMAGE="$RUNTIME_BASE" \
    --volume "$SYSROOT:/usr/local/rust:ro" --volume "$CARGO_HOME/registry:/usr/local/cargo/registry" \
    --volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    --volume "$TARGET_CACHE:/src/target" \
    -t "$IMAGE" "$CTX" 2>&1 | tee "$LOG"
  return "${PIPESTATUS[0]}"
}
long "buildah bud" bud
grep -E 'STEP [0-9]+/|Finished' "$LOG" | sed 's/^/    /'
say "image built"

user=$(buildah "${STORAGE[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")
[ "$user" = "65532:65532" ] || { echo "the image runs as '$user', not 65532:65532" >&2; exit 1; }
entrypoint=$(buildah "${STORAGE[@]}" inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$IMAGE")
[ "$entrypoint" = '[/usr/local/bin/shareplane]' ] || { echo "unexpected entrypoint $entrypoint" >&2; exit 1; }

# A working container of the image, as its configured user, with nothing but the example config
# and a token (validate checks the token is set).
c=$(buildah "${STORAGE[@]}" from --quiet "$IMAGE")
trap 'buildah "${STORAGE[@]}" rm "$c" >/dev/null 2>&1 || true' EXIT
buildah "${STORAGE[@]}" config --env SHAREPLANE_API_TOKEN=image-test-token-0123456789 "$c"
run() { buildah "${STORAGE[@]}" run --isolation chroot "$@"; }
version=$(run "$c" -- /usr/local/bin/shareplane --version)
echo "    shareplane --version in the image: $version"
[[ "$version" =~ ^shareplane\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "unexpected --version output: $version" >&2; exit 1; }
EXAMPLE="$CTX/crates/shareplane/config.example.toml"
out=$(run -v "$EXAMPLE:/etc/shareplane/config.toml:ro" "$c" -- /usr/local/bin/shareplane validate /etc/shareplane/config.toml)
echo "    shareplane validate /etc/shareplane/config.toml (the example) in the image: $out"
[[ "$out" == "configuration is valid"* ]] || { echo "validate failed in the image: $out" >&2; exit 1; }
say "the image runs as 65532:65532; --version and validate pass in it"

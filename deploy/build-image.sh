#!/usr/bin/env bash
# Builds the server image `expel:local` (IMAGE overrides the name) with podman, or docker
# where that is what the machine has (CONTAINER_ENGINE overrides): a static release
# binary (glibc linked in, `-C target-feature=+crt-static`) and the shipped maps in a
# `FROM scratch` image (deploy/Dockerfile), so no base image comes from a registry.
# Prints the binary's path, then the image's name and size.
set -euo pipefail
cd "$(dirname "$0")/.."

engine="${CONTAINER_ENGINE:-$(command -v podman || command -v docker || true)}"
case "$engine" in *podman) export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/containers.conf}" ;; esac
if [ -z "$engine" ]; then
  echo "build-image.sh: neither podman nor docker is installed" >&2
  exit 1
fi
image="${IMAGE:-expel:local}"

# The host's target named explicitly: RUSTFLAGS then reach only what runs in the image,
# not build scripts and proc-macros (which cannot be static).
target="$(rustc -vV | sed -n 's/^host: //p')"
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release --locked --target "$target" --bin expel
bin="target/$target/release/expel"
if ldd "$bin" 2>&1 | grep -q "=>"; then
  echo "build-image.sh: $bin is not static" >&2
  exit 1
fi
echo "binary: $bin"

# The build context: the binary, the maps and the recipe, not the whole tree.
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$bin" "$ctx/expel"
cp -r maps "$ctx/maps"
cp deploy/Dockerfile "$ctx/Dockerfile"
"$engine" build --quiet -t "$image" "$ctx" >/dev/null
size="$("$engine" image inspect "$image" --format '{{.Size}}')"
echo "image: $image, $((size / 1024 / 1024)) MiB ($size bytes)"

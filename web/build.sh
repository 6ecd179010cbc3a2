#!/usr/bin/env bash
# Builds the browser client into web/dist/ (the WebAssembly and its JavaScript glue),
# which `expel` embeds when built afterwards. Needs the wasm32 target and wasm-bindgen's
# CLI at the version web/Cargo.toml pins (installed here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^wasm-bindgen = "=\(.*\)"$/\1/p' web/Cargo.toml)
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || true
if [ "$(wasm-bindgen --version 2>/dev/null | cut -d' ' -f2)" != "$version" ]; then
  echo "installing wasm-bindgen-cli $version"
  # (not --locked: its lock file names a webpki-roots the registry may no longer have)
  cargo install wasm-bindgen-cli --version "$version" --quiet
fi
# The release profile's line tables stay out of the page: wasm-bindgen drops them anyway.
CARGO_PROFILE_RELEASE_DEBUG=0 cargo build -p expel-web --release --target wasm32-unknown-unknown
mkdir -p web/dist
wasm-bindgen --target web --no-typescript --out-dir web/dist \
  target/wasm32-unknown-unknown/release/expel_web.wasm
raw=$(wc -c < web/dist/expel_web_bg.wasm)
gz=$(gzip -9c web/dist/expel_web_bg.wasm | wc -c)
echo "web/dist/expel_web_bg.wasm: $raw bytes, $gz gzipped"

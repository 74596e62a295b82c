#!/usr/bin/env bash
# Installs what mobicore needs on Debian 12 (run as root). Idempotent: does
# nothing when everything is already there.
set -euo pipefail

need_pkgs=(build-essential pkg-config curl ca-certificates clang llvm libbpf-dev libelf-dev
           zlib1g-dev iproute2 tshark redis-server)
missing=()
for p in "${need_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "mobicore: missing packages ${missing[*]}; run as root (apt-get needs it)" >&2
    exit 1
  fi
  echo "mobicore: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] || {
    echo "mobicore: installing the Rust toolchain with rustup" >&2
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt -c clippy >/dev/null
  }
fi
export PATH="$HOME/.cargo/bin:$PATH"
# `./mobicore test` checks formatting and lints first.
if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c" >/dev/null
  done
fi

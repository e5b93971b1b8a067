#!/usr/bin/env bash
# Install the Debian packages moefold needs, only those missing. Run by `make test` and `make demo`
# before anything else, so a fresh Debian machine needs nothing but make and a C compiler.
set -euo pipefail
# clang: the fuzz smoke run (libFuzzer) in `make test`; clang-format: its format check.
pkgs=(build-essential pkg-config libgsl-dev libhwloc-dev libopenmpi-dev openmpi-bin libopenblas-dev
      libcjson-dev libcmocka-dev gnuplot-nox clang clang-format)
missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "install-deps: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"

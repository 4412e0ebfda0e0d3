#!/usr/bin/env bash
# Installs what kiln needs to build and test on Debian 12, from Debian's packages only (the
# tests take ONNX Runtime, their reference for the ai.onnx.ml ops, from PyPI into a venv).
set -euo pipefail
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
pkgs=(cmake ninja-build g++ clang libclang-rt-14-dev libonnx-dev libprotobuf-dev protobuf-compiler
      libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libbenchmark-dev libjpeg-dev libpng-dev libwebp-dev python3 python3-onnx python3-numpy python3-venv
      pkg-config libopenblas-serial-dev  # these two: the optional OpenBLAS backend (its serial build)
      libdnnl-dev  # the optional oneDNN backend (src/backends/onednn)
      libxnnpack-dev libpthreadpool-dev)  # these two: the optional XNNPACK backend (src/backends/xnnpack)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

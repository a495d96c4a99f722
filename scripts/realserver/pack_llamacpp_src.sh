#!/usr/bin/env bash
# Make a pruned llama.cpp source tarball (~9 MB) from the cached llama-cpp-python sdist,
# enough to build `llama-server` (CPU or CUDA) on a machine with no network, e.g. the
# GPU box used for the soak (scripts/realserver/h200_soak.sh).
#
#   scripts/realserver/pack_llamacpp_src.sh OUT.tar.gz
set -euo pipefail
VERSION="${STRESS_LLAMACPP_PY_VERSION:-0.3.36}"
CACHE="${STRESS_CACHE_DIR:-$HOME/.cache/stress-realserver}"
SDIST="$CACHE/downloads/llama_cpp_python-$VERSION.tar.gz"
OUT="$(realpath -m "${1:?usage: pack_llamacpp_src.sh OUT.tar.gz}")"  # absolute: the script changes folder
[[ -f "$SDIST" ]] || { echo "no $SDIST: run scripts/realserver/build_llamacpp.sh first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/llama.cpp"
tar -xzf "$SDIST" -C "$work/llama.cpp" --strip-components=3 "llama_cpp_python-$VERSION/vendor/llama.cpp"
cd "$work/llama.cpp"
# Not needed to build llama-server: docs, vocab models, tests, examples, web UI sources,
# Python tooling and the GPU backends other than CUDA.
rm -rf docs models media gguf-py benches tests examples pocs conversion skills ci \
    tools/ui/src tools/ui/tests tools/ui/package-lock.json tools/server/tests
for b in ggml/src/ggml-{et,metal,hexagon,sycl,vulkan,opencl,cann,musa,hip,webgpu,zdnn,zendnn,openvino,virtgpu}; do
    rm -rf "$b"
done
cd "$work"
tar -czf "$OUT.tmp" llama.cpp
mv "$OUT.tmp" "$OUT"
echo "$OUT ($(du -h "$OUT" | cut -f1))"

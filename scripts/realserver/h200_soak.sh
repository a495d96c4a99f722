#!/usr/bin/env bash
# Device call 2 of 2 (GPU soak): join the model parts, start the CUDA llama-server on
# 127.0.0.1, capture its payloads, run the compressed eight-user soak with GPU telemetry,
# and write the report. Run from the repo root with `.realserver/b` carried, on the machine
# h200_build.sh left warm. Everything worth keeping goes to $OUT (at most 8 files).
#   SOAK_DURATION (default 5m), SOAK_PARALLEL (8), SOAK_CTX (65536), LLAMA_SERVER, MODEL
set -euo pipefail
W=build/realserver  # under the repo .gitignore: kept on a warm machine between calls
OUT="${OUT:-/tmp/soak-out}"
mkdir -p "$OUT" "$W/payloads"
DUR="${SOAK_DURATION:-5m}"
PAR="${SOAK_PARALLEL:-8}"
CTX="${SOAK_CTX:-65536}"
SERVER="${LLAMA_SERVER:-$W/llama-server}"
MODEL="${MODEL:-$W/model.gguf}"
WANT=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
[[ -x "$SERVER" ]] || { echo "no $SERVER: the machine went cold after h200_build.sh; run it again"; exit 3; }
if [[ ! -f "$MODEL" ]]; then
    cat "$W/model.part00" .realserver/b/model.part01 .realserver/b/model.part02 >"$MODEL"
fi
[[ "$(sha256sum "$MODEL" | cut -d' ' -f1)" == "$WANT" ]] || { echo "model sha256 mismatch"; exit 4; }
export PYTHONPATH="$PWD/build/realserver/site:$PWD" PYTHONUNBUFFERED=1
PORT=18080
URL="http://127.0.0.1:$PORT"
"$SERVER" -m "$MODEL" -ngl 99 --parallel "$PAR" -c "$CTX" --metrics --host 127.0.0.1 \
    --port "$PORT" >"$OUT/server.log" 2>&1 &
SPID=$!
trap 'kill $SPID 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
    curl -sf "$URL/health" >/dev/null && break
    kill -0 $SPID || { tail -30 "$OUT/server.log"; exit 5; }
    sleep 1
done
curl -sf "$URL/health" >/dev/null || { echo "server not healthy in 120 s"; exit 6; }
P="$W/payloads"
for ep in props slots v1/models health metrics; do
    curl -s "$URL/$ep" >"$P/before_${ep//\//_}.txt"
done
curl -sN "$URL/v1/chat/completions" -H 'Content-Type: application/json' -d '{"model":"x",
 "messages":[{"role":"user","content":"Name three uses of a GPU soak test."}],
 "max_tokens":60,"stream":true,"stream_options":{"include_usage":true}}' >"$P/sse_chat_stream.txt"
nvidia-smi -q >"$P/nvidia_smi_q.txt" 2>&1 || true
rm -rf "$W/runs"
set +e  # from here on keep whatever was measured, even if a step fails
python3 -m stress run scripts/realserver/soak_eight_users_5m.yaml --target "$URL" \
    --out "$W/runs" --no-tui --duration "$DUR" --progress-interval 30s 2>&1 | tee "$OUT/stress_stdout.txt"
for ep in slots metrics; do
    curl -s "$URL/$ep" >"$P/after_${ep}.txt"
done
kill $SPID; wait $SPID 2>/dev/null || true
RUN="$(ls -d "$W"/runs/*/ | head -1)"
tar -czf "$OUT/run.tar.gz" -C "$W/runs" .
tar -czf "$OUT/payloads.tar.gz" -C "$W" payloads
cp "$RUN/summary.json" "$RUN/manifest.json" "$OUT/"
python3 scripts/realserver/soak_report.py "$RUN" --out "$OUT/report.md" \
    --server-log "$OUT/server.log" | tail -60
ls -la "$OUT"

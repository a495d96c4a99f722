#!/usr/bin/env bash
# Device calls of the H200 capacity search (docs/validation/2026-12-01-capacity-h200.md).
#
#   CAP_SERVER_FLAGS="--cache-ram 0" bash scripts/realserver/h200_capacity.sh all
#       one call from a cold machine, `.realserver/a` carried: build, model, server,
#       calibration, search, hand check (run 2 of the doc, ~590 s)
#   bash scripts/realserver/h200_capacity.sh build    # run 1, call 1, `.realserver/a` carried
#   bash scripts/realserver/h200_capacity.sh search   # run 1, call 2, right after (nothing carried)
#
# build: install the carried wheels, write a random-weight 3B Llama-shape F16 GGUF on the
#   card's machine (gpu_bigmodel.py from ../shared/gpu, SmolLM2's tokenizer), build
#   llama-server with CUDA for sm_90, start it in its own session (setsid: it outlives the
#   call and serves the search call) with 16 slots of 8,192 tokens, and calibrate the SLO: a
#   plain `stress run` at 16 users (one per slot, never waiting for one) gives TTFT p95 and
#   e2e p50; the SLO is TTFT p95 + e2e p50 / 4.
# search: `stress capacity` with that SLO (8, 16, 32 users, then bisection), then plain
#   `stress run` at the bracket's two ends (the hand check), and pack everything to $OUT.
#
# `.realserver/a` holds (see the doc's "Reproduce"): llama.cpp-src.tar.gz
# (pack_llamacpp_src.sh), whl/*.whl (orjson, httptools, pydantic, pydantic_core, annotated-types,
# typing-inspection, typing_extensions, gguf 0.19 for cp312), vocab.gguf (tokenizer.* keys of
# SmolLM2's GGUF, 1.7 MB), gpu_bigmodel.py, src/stress (`git archive 7a74c0e stress`: the stress
# that ran, frozen, so edits in progress in the working tree do not travel into the run;
# PYTHONSAFEPATH keeps `python3 -m stress` from importing the working tree's copy instead).
# Outputs stay on the warm machine under build/realserver (ignored by the repo .gitignore; a
# folder only in .git/info/exclude, like .realserver/, is wiped between calls).
#   CAP_SERVER_FLAGS (extra llama-server flags, e.g. "--cache-ram 0"), CAP_DEADLINE (s after
#   the start by which everything must be packed, default 585), CAP_PORT (18080),
#   CAP_CTX (131072 = 16 x 8192), CAP_MAX_REPEAT (passes a step may run while undecided, 4)
set -uo pipefail
MODE="${1:?usage: h200_capacity.sh build|search|all}"
W="$PWD/build/realserver"
OUT="${OUT:-/tmp/cap-out}"
mkdir -p "$W" "$OUT"
PORT="${CAP_PORT:-18080}"
URL="http://127.0.0.1:$PORT"
CTX="${CAP_CTX:-131072}"
DEADLINE="${CAP_DEADLINE:-585}"
SCEN=scripts/realserver/capacity_h200_16slots.yaml
RUNSCEN=scripts/realserver/capacity_h200_16slots.run.yaml  # the scenario with the derived SLO
export PYTHONSAFEPATH=1 PYTHONPATH="$W/site:$W/src" PYTHONUNBUFFERED=1 STRESS_CORPUS_ROOTS="$PWD/corpora"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }

start_server() {
    # shellcheck disable=SC2086  # CAP_SERVER_FLAGS is a list of flags
    setsid "$W/llama-server" -m "$W/model3b.gguf" -ngl 99 --parallel 16 -c "$CTX" --metrics \
        --host 127.0.0.1 --port "$PORT" ${CAP_SERVER_FLAGS:-} >"$W/server.log" 2>&1 < /dev/null &
    for _ in $(seq 1 180); do
        curl -sf "$URL/health" >/dev/null && { el "server healthy (flags: ${CAP_SERVER_FLAGS:-none})"; return 0; }
        sleep 1
    done
    el "server not healthy in 180 s"; tail -30 "$W/server.log"; return 1
}

calibrate() {  # stress run at 16 users; SLO = TTFT p95 + e2e p50 / 4 -> $W/slo.txt
    rm -rf "$W/calib"
    timeout 120 python3 -m stress run "$SCEN" --target "$URL" --users 16 --out "$W/calib" \
        --no-tui --fail-on never --progress-interval 10s 2>&1 | tee "$OUT/calib_stdout.txt" | tail -22
    python3 - "$W" <<'EOF'
import glob, json, sys
w = sys.argv[1]
s = json.load(open(glob.glob(w + "/calib/*/summary.json")[0]))
o = s["overall"]
ttft, e2e = o["ttft_s"]["p95"], o["e2e_s"]["p50"]
slo = ttft + e2e / 4
open(w + "/slo.txt", "w").write(f"{slo:.3f} {ttft:.4f} {e2e:.4f} {o['decode_tok_s']['p50']:.1f}\n")
print(f"calibration at 16 users: TTFT p95 {ttft:.3f} s, e2e p50 {e2e:.3f} s, "
      f"decode p50 {o['decode_tok_s']['p50']:.1f} tok/s -> SLO TTFT p95 <= {slo:.3f} s")
EOF
}

build() {
    nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,power.limit,clocks.max.sm,power.draw \
        --format=csv | tee -a "$W/info.txt"
    { python3 --version; nproc; } | tee -a "$W/info.txt"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$W/site" .realserver/a/whl/*.whl || exit 1
    rm -rf "$W/src"; cp -r .realserver/a/src "$W/src"
    python3 -c "import stress.runtime.run, stress.collectors.gpu, gguf; print('imports ok', stress.__file__)" || exit 1
    # the model, on CPU while the server builds: 28 layers x 3072, 24 heads (8 KV), FFN 8192
    ( python3 .realserver/a/gpu_bigmodel.py .realserver/a/vocab.gguf "$W/model3b.gguf" \
        >"$W/model.log" 2>&1; echo "model exit $?" >>"$W/model.log" ) &
    MPID=$!
    if [[ ! -x "$W/llama-server" ]]; then
        rm -rf "$W/llama.cpp" "$W/build"
        tar -xzf .realserver/a/llama.cpp-src.tar.gz -C "$W"
        start=$(date +%s)
        cmake -S "$W/llama.cpp" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
            >"$W/configure.log" 2>&1 || { tail -40 "$W/configure.log"; exit 1; }
        cmake --build "$W/build" --target llama-server -j"$(nproc)" >"$W/build.log" 2>&1 \
            || { tail -40 "$W/build.log"; exit 1; }
        echo "build_seconds=$(( $(date +%s) - start ))" | tee "$W/build.stamp"
        cp "$W/build/bin/llama-server" "$W/llama-server"
        "$W/llama-server" --version 2>&1 | tee -a "$W/build.stamp"
        rm -rf "$W/build" "$W/llama.cpp"
    fi
    wait $MPID; cat "$W/model.log"; ls -la "$W/model3b.gguf" || exit 1
    sha256sum "$W/model3b.gguf" | tee -a "$W/build.stamp"
    cat "$W/build.stamp" >>"$W/info.txt"
    el "built"
    start_server || exit 1
    for ep in props slots; do curl -s "$URL/$ep" >"$W/$ep.json"; done
    nvidia-smi --query-gpu=power.draw,memory.used,utilization.gpu,clocks.sm --format=csv \
        | tee -a "$W/info.txt"
    calibrate
}

search() {
    [[ -x "$W/llama-server" && -f "$W/model3b.gguf" ]] \
        || { echo "no server build: the machine went cold after the build call; run build again"; exit 3; }
    curl -sf "$URL/health" >/dev/null || start_server || exit 5
    [[ -f "$W/slo.txt" ]] || calibrate
    read -r SLO TTFT16 E2E16 DEC16 <"$W/slo.txt"
    el "SLO: TTFT p95 <= ${SLO} s (16 users: TTFT p95 ${TTFT16} s, e2e p50 ${E2E16} s, decode p50 ${DEC16})"
    sed "s/^slo: .*/slo: {ttft_p95: ${SLO}s}             # derived on the card: ${TTFT16} + ${E2E16} \/ 4/" \
        "$SCEN" >"$RUNSCEN"
    grep -n '^slo:' "$RUNSCEN"
    cp "$RUNSCEN" "$OUT/scenario_run.yaml"
    nvidia-smi --query-gpu=power.draw,memory.used,utilization.gpu,clocks.sm --format=csv | tee -a "$W/info.txt"
    rm -rf "$W/cap" "$W/hand"
    # leave ~55 s for the hand check and the packing; about 7 steps of ~6-12 replies a pass
    # (~55 replies a pass set): two passes a step only when they fit
    BUDGET=$(( $(left) - 55 ))
    REPEAT=$(python3 -c "print(2 if 110 * $E2E16 + 45 <= $BUDGET else 1)")
    # a step whose passes straddle the SLO runs more, up to CAP_MAX_REPEAT (default 4)
    MAXREP=$(( ${CAP_MAX_REPEAT:-4} > REPEAT ? ${CAP_MAX_REPEAT:-4} : REPEAT ))
    el "search: ${BUDGET} s at most, ${REPEAT} pass(es) a step, up to ${MAXREP} when undecided"
    timeout "$BUDGET" python3 -m stress capacity "$RUNSCEN" --target "$URL" \
        --out "$W/cap" --no-tui --progress-interval 15s --repeat "$REPEAT" --max-repeat "$MAXREP" \
        >"$OUT/search_stdout.txt" 2>&1
    el "search exit $?"
    grep -v '^\[' "$OUT/search_stdout.txt" | grep -E '^(step|capacity|llama.cpp|stopped|search)' || true
    ROOT="$(ls -d "$W"/cap/*/ | head -1)"
    cp "$ROOT/capacity.json" "$OUT/capacity.json"
    # hand check: plain `stress run` at the bracket's two ends
    read -r LO HI < <(python3 -c "
import json; b = json.load(open('$ROOT/capacity.json'))['bracket']; print(b[0] or 0, b[1] or 0)")
    for N in $LO $HI; do
        [[ "$N" -gt 0 ]] || continue
        (( $(left) > 32 )) || { el "no time left for the hand check at $N"; continue; }
        el "hand check at $N users"
        timeout $(( $(left) - 8 )) python3 -m stress run "$RUNSCEN" --target "$URL" --users "$N" \
            --out "$W/hand" --no-tui --fail-on never 2>&1 | grep -v '^\[' \
            | tee -a "$OUT/hand_stdout.txt" | grep -E '^(verdict|capacity|TTFT|e2e|decode)'
    done
    for ep in slots metrics; do curl -s "$URL/$ep" >"$W/after_$ep.txt"; done
    { head -120 "$W/server.log"; echo ...; tail -40 "$W/server.log"; } >"$OUT/server_log.txt"
    cp "$W/info.txt" "$OUT/info.txt" 2>/dev/null
    tar -czf "$OUT/search.tar.gz" -C "$W" cap hand calib slo.txt info.txt props.json slots.json \
        after_slots.txt after_metrics.txt 2>/dev/null
    ls -la "$OUT"
    el "done"
}

case "$MODE" in
    build) build; head -120 "$W/server.log" >"$OUT/server_log_head.txt"
           cp "$W/info.txt" "$OUT/info.txt"; el "done: the server keeps running for the search call" ;;
    search) search ;;
    all) build; search ;;
    *) echo "usage: h200_capacity.sh build|search|all"; exit 2 ;;
esac

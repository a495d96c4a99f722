#!/usr/bin/env bash
# Device call: llama.cpp's host-RAM prompt cache seen as a tier below the slots (issue 35).
#
#   CAP_SERVER_FLAGS="" bash scripts/realserver/h200_capacity.sh build   # call 1 (.realserver/a carried)
#   bash scripts/realserver/h200_host_cache.sh                           # call 2, within 30 s
#
# Runs host_cache_h200_24users.yaml against the server the build call left running (llama.cpp's
# default --cache-ram, 8 GiB), then restarts it with --cache-ram 0 and runs it again; both run
# directories come back in $OUT/runs.tar.gz, to be analysed by the stress of the working tree
# (every report is rebuilt from the run directory).
set -uo pipefail
W="$PWD/build/realserver"
OUT="${OUT:-/tmp/cap-out}"
PORT="${CAP_PORT:-18080}"
URL="http://127.0.0.1:$PORT"
SCEN=scripts/realserver/host_cache_h200_24users.yaml
export PYTHONSAFEPATH=1 PYTHONPATH="$W/site:$W/src" PYTHONUNBUFFERED=1 STRESS_CORPUS_ROOTS="$PWD/corpora"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
[[ -x "$W/llama-server" && -f "$W/model3b.gguf" ]] || { echo "no build: run the build call first"; exit 3; }
mkdir -p "$OUT"; rm -rf "$W/hc"

serve() {  # $1: extra flags
    pkill -f llama-server; sleep 2
    # shellcheck disable=SC2086
    setsid "$W/llama-server" -m "$W/model3b.gguf" -ngl 99 --parallel 16 -c 131072 --metrics \
        --host 127.0.0.1 --port "$PORT" $1 >"$W/server-$2.log" 2>&1 < /dev/null &
    for _ in $(seq 1 120); do curl -sf "$URL/health" >/dev/null && { el "server up ($2: ${1:-defaults})"; return 0; }; sleep 1; done
    el "server not healthy"; tail -20 "$W/server-$2.log"; return 1
}

for case in default:"" ram0:"--cache-ram 0"; do
    name="${case%%:*}"; flags="${case#*:}"
    serve "$flags" "$name" || exit 4
    timeout 200 python3 -m stress run "$SCEN" --target "$URL" --out "$W/hc/$name" --no-tui \
        --fail-on never --progress-interval 30s 2>&1 | grep -v '^\[' | tail -25 | tee "$OUT/$name.txt"
    grep -ciE "prompt cache|cache state|cache_ram|restor" "$W/server-$name.log" | sed "s/^/$name cache log lines: /"
    grep -iE "cache state|prompt cache" "$W/server-$name.log" | tail -8 >"$OUT/$name-cachelog.txt"
    el "$name done"
done
tar -czf "$OUT/runs.tar.gz" -C "$W/hc" default ram0
ls -la "$OUT"; el "done"

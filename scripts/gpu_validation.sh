#!/usr/bin/env bash
# GPU telemetry validation on a real card: `stress gpus`, then a short `stress run` with
# GPU telemetry while a PyTorch matmul load runs, with `nvidia-smi` sampling the same card
# every second beside it. Used on the lent H200 (see docs/validation/); needs torch there.
# Usage: OUT=dir bash scripts/gpu_validation.sh
set -u
OUT=${OUT:-/tmp/gpuval}
mkdir -p "$OUT"
python3 -m stress gpus > "$OUT/gpus.txt" 2>&1
python3 -m stress gpus --json > "$OUT/gpus.json" 2>&1
cat > /tmp/gpuval.yaml <<YAML
name: gpu_validation
target: {url: sim}
users: {count: 3, think_time: {min: 0.5s, max: 1s}}
duration: 40s
conversation:
  ceiling_tokens: 8000
  turn:
    paste: {corpus: $PWD/corpora/en, tokens: [300, 600]}
    ask: ["Summarise."]
request: {max_tokens: 64}
telemetry: {interval: 1s}
YAML
nvidia-smi --query-gpu=timestamp,power.draw,power.limit,temperature.gpu,temperature.memory,clocks.sm,clocks.mem,utilization.gpu,memory.used,clocks_event_reasons.active,pcie.link.gen.current,pcie.link.width.current \
  --format=csv,nounits -lms 1000 > "$OUT/nvidia_smi.csv" &
smi=$!
python3 - <<'PY' &
import time, torch
time.sleep(10)                      # 10 s idle first, then 20 s of matmuls, then idle
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = time.time()
while time.time() - t < 20:
    for _ in range(50):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
PY
load=$!
python3 -m stress run /tmp/gpuval.yaml --no-tui --out /tmp/gpuval-run > "$OUT/run_stdout.txt" 2>&1
wait $load
kill $smi
d=$(ls -d /tmp/gpuval-run/*/ | head -1)
cp "$d/gpu.jsonl" "$d/summary.json" "$d/events.jsonl" "$OUT/" 2>/dev/null
python3 -c "import json;m=json.load(open('$d/manifest.json'));print(json.dumps({k:m.get(k) for k in ('collectors','probe','versions')},indent=1))" > "$OUT/manifest_excerpt.json"

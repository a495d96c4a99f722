#!/usr/bin/env bash
# TTFT accuracy (p50 and p99) and paced busy time on a quiet 16-core machine (the H200
# device host). Client on cpu 2, paced server on cpu 3. Wheels for the pinned deps that the
# host's Python lacks are installed into /tmp/site from the folder given as $1.
# Usage on the device: bash benchmarks/h200.sh .whl-bench "$OUT"
set -u
wheels=${1:-.whl-bench}
out=${2:-/tmp}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$wheels"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
py=python3
{ nproc; uptime; $py --version; } 2>&1 | tee "$out/machine.txt"
taskset -c 2 $py benchmarks/ttft_accuracy.py --streams 16 128 --repeat 2 --duration 8 \
    --server-cpu 3 2>&1 | tee "$out/ttft_accuracy.txt"
taskset -c 2 $py benchmarks/paced.py --streams 64 --repeats 3 --measure 6 \
    --server-cpu 3 2>&1 | tee "$out/paced.txt"
# throughput, where an nginx binary (and the libraries it needs) was carried beside the wheels
if [ -x "$wheels/nginx" ]; then
    mkdir -p /tmp/nginxbin
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/nginx "$@"\n' \
        "$(realpath "$wheels")" "$(realpath "$wheels")" > /tmp/nginxbin/nginx
    chmod +x /tmp/nginxbin/nginx
    PATH=/tmp/nginxbin:$PATH taskset -c 2 $py benchmarks/throughput.py --repeats 2 \
        --warmup 1 --measure 4 --server-cpu 3 2>&1 | tee "$out/throughput.txt"
    # the whole `stress run` against the reference loop (it pins its own clients: not taskset)
    PATH=/tmp/nginxbin:$PATH $py benchmarks/e2e.py --streams 64 256 1024 2000 --repeat 3 \
        --duration 12 --warmup 3 --client-cpu 2 --server-cpu 3 2>&1 | tee "$out/e2e.txt"
fi

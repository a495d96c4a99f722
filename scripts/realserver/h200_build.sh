#!/usr/bin/env bash
# Device call 1 of 2 (GPU soak): install the carried wheels, build llama-server with CUDA
# for sm_90 from the pruned source, stage the first model part. Run from the repo root on
# the GPU machine with `.realserver/a` carried (see docs/validation/ for the procedure):
#   .realserver/a/llama.cpp-src.tar.gz  (scripts/realserver/pack_llamacpp_src.sh)
#   .realserver/a/whl/*.whl             (orjson, pydantic, pydantic_core, ... for cp312)
#   .realserver/a/model.part00          (first 45 MB of the GGUF; `split -b 45000000 -d`)
# Outputs stay on the warm machine under build/realserver (ignored by the repo .gitignore;
# a folder only in .git/info/exclude, like .realserver/, is not kept between calls).
set -euo pipefail
W=build/realserver  # under the repo .gitignore: kept on a warm machine between calls
mkdir -p "$W" "${OUT:-/tmp}"
nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,power.limit,clocks.max.sm --format=csv
python3 --version
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target build/realserver/site .realserver/a/whl/*.whl
PYTHONPATH=build/realserver/site:. python3 -c "import stress.runtime.run, stress.collectors.gpu; print('stress imports ok')"
cp .realserver/a/model.part00 "$W/"
command -v curl || echo "NO CURL"
# smoke: the stress CLI against its own simulator, while the server builds
(timeout 60 env PYTHONPATH=build/realserver/site:. python3 -m stress run scenarios/quickstart.yaml \
    --duration 4s --out "$W/smoke" --no-tui >"$W/smoke.log" 2>&1; echo "smoke exit $?" >>"$W/smoke.log") &
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
cp "$W/build.stamp" "${OUT:-/tmp}/build.stamp"
rm -rf "$W/build" "$W/llama.cpp"
wait
tail -25 "$W/smoke.log"
ls -la "$W"

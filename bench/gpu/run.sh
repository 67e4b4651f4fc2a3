#!/bin/bash
# bench/gpu/run.sh — the GPU decoder's checks and benchmarks, in one go, on a GPU host that has
# CUDA 13 with nvJPEG but none of conveyor's build dependencies: the binaries are built
# elsewhere and brought in $1 (bin/ and lib/ from bench/gpu/pack.sh). Writes its log and JSON
# lines to $OUT (or /tmp/conveyor-gpu). Steps: nvJPEG declarations against the real
# nvjpeg.h; the GPU test suite (and its stage tests under TSan, where packed); a synthetic
# dataset in shards; the pipeline, CPU decode vs GPU decode (measured split, and GPU only),
# alternated over $ROUNDS rounds, then the source alone; decode alone: conveyor's stage, a
# plain nvJPEG loop and torchvision.io.decode_jpeg on the same JPEGs.
#     OUT=/tmp/o ROUNDS=2 N=25600 TSAN_TIMEOUT=240 bench/gpu/run.sh .gpu
set -u
PACK=${1:-.gpu}
OUT=${OUT:-/tmp/conveyor-gpu}
N=${N:-25600}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
step() { echo; echo "=== $* ($(date +%T))"; }

step machine
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nproc; grep -m1 'model name' /proc/cpuinfo
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVJPEG_H=$(find "$CUDA"/ /usr/include /usr/local -name nvjpeg.h 2>/dev/null | head -1)
NVJPEG_SO=$(find "$CUDA"/ /usr/lib /usr/local /opt -name 'libnvjpeg.so*' 2>/dev/null | head -1)
echo "nvjpeg.h: $NVJPEG_H; libnvjpeg: $NVJPEG_SO"
LIBDIRS="$PACK/lib:$CUDA/lib64:$CUDA/lib"
[ -n "$NVJPEG_SO" ] && LIBDIRS="$LIBDIRS:$(dirname "$NVJPEG_SO")"
export LD_LIBRARY_PATH="$LIBDIRS:${LD_LIBRARY_PATH:-}"
for lib in $(ldd "$PACK/bin/conveyor-bench" | awk '/not found/ {print $1}'); do
  d=$(find / -name "$lib*" -not -path '/proc/*' 2>/dev/null | head -1)
  [ -n "$d" ] && export LD_LIBRARY_PATH="$(dirname "$d"):$LD_LIBRARY_PATH" && echo "found $lib in $(dirname "$d")"
done
ldd "$PACK/bin/conveyor-bench" | grep "not found"

step "nvJPEG declarations vs nvjpeg.h"
if [ -n "$NVJPEG_H" ]; then
  g++ -std=c++20 -Iinclude -I"$(dirname "$NVJPEG_H")" -I"$CUDA/include" tests/cuda/nvjpeg_api_check.cpp -o /tmp/api_check && /tmp/api_check
  echo "api_check exit $?"
else
  echo "no nvjpeg.h found"
fi

step "GPU tests"
CONVEYOR_GO_IMAGE_TESTDATA="$PACK/go-testdata" timeout 300 "$PACK/bin/conveyor-cuda-tests" --no-intro=true -tce='*loader*' 2>&1 | tail -80

if [ -x "$PACK/bin/conveyor-cuda-tests-tsan" ]; then
  step "GPU decode stage tests under ThreadSanitizer"
  # setarch -R: TSan's shadow memory needs the address layout without the newest kernels' randomization.
  CONVEYOR_GO_IMAGE_TESTDATA="$PACK/go-testdata" TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1" \
    timeout "${TSAN_TIMEOUT:-240}" setarch "$(uname -m)" -R "$PACK/bin/conveyor-cuda-tests-tsan" --no-intro=true -tc='GPU decode*' > "$OUT/tsan.txt" 2>&1
  echo "exit $?; ThreadSanitizer warnings: $(grep -c 'WARNING: ThreadSanitizer' "$OUT/tsan.txt")"
  grep -A14 -m3 'WARNING: ThreadSanitizer' "$OUT/tsan.txt"
  tail -4 "$OUT/tsan.txt"
fi

step "dataset: $N synthetic JPEGs (500x375) in shards on /dev/shm"
timeout 300 "$PACK/bin/quickstart" --dir /dev/shm/ds --count "$N" --classes 100 --epochs 0 2>&1 | tail -4
INDEX=/dev/shm/ds/shards/index.json
ls /dev/shm/ds/shards | head -3

step "pipeline: shards -> random-resized crop 224 -> device batches of 256 (alternated, $ROUNDS rounds)"
B="$PACK/bin/conveyor-bench"
for round in $(seq "$ROUNDS"); do
  for mode in cpu gpu gpu-only; do
    case $mode in
      cpu) args="--cuda" ;;
      gpu) args="--gpu-decode" ;;
      gpu-only) args="--gpu-decode --cpu-share 0" ;;
    esac
    echo "--- round $round, $mode"
    timeout 240 "$B" pipeline "$INDEX" --batch 256 --size 224 --epochs 3 --decode-only 0 $args 2>&1 | grep -v '^\[' | tee -a "$OUT/pipeline.jsonl"
  done
done
echo "--- GPU only, then the source alone (shards -> shuffle, nothing decoded): the ceiling of any decoder it feeds"
timeout 240 "$B" pipeline "$INDEX" --batch 256 --size 224 --epochs 3 --decode-only 0 --gpu-decode --cpu-share 0 --source-rate 2>&1 | grep -v '^\[' | tee -a "$OUT/pipeline.jsonl"

step "decode alone: 2048 JPEGs in memory, batches of 256"
if [ -n "$NVJPEG_H" ]; then
  g++ -O2 -std=c++17 bench/gpu/nvjpeg_loop.cpp -I"$(dirname "$NVJPEG_H")" -I"$CUDA/include" -L"$(dirname "${NVJPEG_SO:-$CUDA/lib64/x}")" -L"$CUDA/lib64" -lnvjpeg -lcudart -o /tmp/nvjpeg_loop
fi
for round in $(seq "$ROUNDS"); do
  timeout 120 "$B" gpu-decode /dev/shm/ds/images --count 2048 --batch 256 --repeats 5 2>&1 | tee -a "$OUT/decode.jsonl"
  [ -x /tmp/nvjpeg_loop ] && timeout 120 /tmp/nvjpeg_loop /dev/shm/ds/images --count 2048 --batch 256 --repeats 5 | tee -a "$OUT/decode.jsonl"
  timeout 180 python3 bench/gpu/torchvision_decode.py /dev/shm/ds/images --count 2048 --batch 256 --repeats 5 2>&1 | tee -a "$OUT/decode.jsonl"
  timeout 120 "$B" gpu-decode /dev/shm/ds/images --count 2048 --batch 256 --repeats 5 --rrc 224 2>&1 | tee -a "$OUT/decode.jsonl"
done
step done

#!/usr/bin/env bash
# The prepared run of benchmarks/accelerator_step.py on a GPU machine without network access that has
# Python 3.12, jax with CUDA, torch and transformers, and no TensorFlow (docs/benchmarks.md, "On an
# accelerator (JAX)").
#
# On a machine with network access, once:   benchmarks/accelerator_run.sh download
#   fetches the wheels of benchmarks/accelerator_requirements.txt for Python 3.12 x86-64 into .whl/.
# Copy the checkout with its .whl/ to the GPU machine (rsync, scp or a disk), then there:
#                                             benchmarks/accelerator_run.sh [accelerator_step.py flags]
#   installs the carried wheels into /tmp/site, runs the benchmark within 8 minutes (Base and Large at
#   512, remat none and full, transformers' XLNet beside each preset; ACCELERATOR_TIMEOUT_S changes
#   the limit) and writes to $OUT (default /tmp/accelerator-out): accelerator_step.jsonl (the JSON
#   lines), stderr.txt, gpu.txt (nvidia-smi and the package versions).
# Or a real pretraining run of the JAX engine there:
#                                             benchmarks/accelerator_run.sh train DATA_DIR [xlnet train flags]
#   `xlnet train --backend jax` at Base, seq_len 512, mixed_bfloat16 on DATA_DIR (a data directory
#   `xlnet preprocess --seq-len 512 --reuse-len 256` wrote, carried with the checkout) for
#   ACCELERATOR_TRAIN_S seconds (default 180), then SIGTERM (the run saves and exits 0); writes
#   $OUT/train/: the model directory (step log, goodput.json), train.txt (its output) and
#   train_summary.json (tokens/s, MFU, goodput, input-wait share, peak memory against the planner's).
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = download ]; then
  mkdir -p .whl
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl -r benchmarks/accelerator_requirements.txt \
    || exit
  du -cb .whl/*.whl | tail -1
  exit 0
fi

out=${OUT:-/tmp/accelerator-out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "installing the carried wheels failed: copy .whl/ here with the checkout" \
       "(benchmarks/accelerator_run.sh download fetches it where there is network access)"; exit 1; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 KERAS_BACKEND=jax
# A rerun on the same warm machine compiles nothing twice.
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jax-cache}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
python3 - >> "$out/gpu.txt" 2>&1 <<'PY'
import importlib
for name in ("jax", "keras", "optree", "torch", "transformers"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as error:  # one missing package must not hide the others' versions
        print(name, "missing:", error)
import jax
print("jax devices", jax.devices())
PY
if [ "${1:-}" = train ]; then
  data=${2:?"give the data directory: benchmarks/accelerator_run.sh train DATA_DIR [xlnet train flags]"}
  shift 2
  rm -rf "$out/train" && mkdir -p "$out/train"
  timeout -s TERM "${ACCELERATOR_TRAIN_S:-180}" python3 xlnet_cli.py train --backend jax --data "$data" \
    --model-dir "$out/train/model" --preset base --set precision=mixed_bfloat16 --set seq_len=512 \
    --set reuse_len=256 --set num_predict=85 --set train_steps=1000000 --set checkpoint_every=1000000 \
    --set eval_every=0 --set steps_per_loop=10 "$@" > "$out/train/train.txt" 2>&1
  status=$?
  python3 benchmarks/accelerator_train_summary.py "$out/train/model" | tee "$out/train/train_summary.json"
  cat "$out/gpu.txt"; tail -5 "$out/train/train.txt"
  echo "exit status $status (0: stopped by SIGTERM after saving, as planned)"
  exit $status
fi
# 450 s for settings to start in, 480 s in all by default: a GPU lent for 10 minutes at a time also
# has to start and install within them.
timeout "${ACCELERATOR_TIMEOUT_S:-480}" python3 benchmarks/accelerator_step.py --budget-s 450 --steps 8 --output "$out/accelerator_step.jsonl" "$@" \
  2> "$out/stderr.txt"
status=$?
cat "$out/gpu.txt"
echo "exit status $status; $(wc -l < "$out/accelerator_step.jsonl" 2>/dev/null || echo 0) lines in $out/accelerator_step.jsonl"
exit $status

#!/usr/bin/env bash
# Run on a lent GPU machine (docs/gpu.md): install the bundle scripts/gpu_bundle.sh made,
# then the quickstart sweep on the GPU (every algorithm untuned, with and without CUDA
# graphs, tuned points, PyTorch in three modes) and the CUDA tests. Logs and results land
# in $OUT.
#   gpu_check.sh stage   # call 1: keep .gpu/a (most of TVM's library) in /tmp
#   gpu_check.sh run     # call 2, at once (the machine stays warm 30 s): install, check
# Time limits (seconds) for the parts: SWEEP_S, TESTS_S (0: skip that part). TESTS_K: which of
# the CUDA tests (pytest -k; default: all). PASSES: the sweep's timing passes (default 1: a
# GPU's kernels do not move with vCPU placement as a 2-vCPU host's do). FP16=0: no float16 rows.
set -uo pipefail
cd "$(dirname "$0")/.."
KEEP=/tmp/dlas-gpu
SITE=/tmp/dlas-site
OUT=${OUT:-/tmp/dlas-gpu-out}
mkdir -p "$KEEP" "$OUT"
case "${1:-run}" in
stage)
    cp .gpu/a/compiler.xz.* "$KEEP/" && ls -la "$KEEP" && exit 0 ;;
run) ;;
*) echo "usage: gpu_check.sh stage|run" >&2; exit 2 ;;
esac
export PYTHONUNBUFFERED=1
cp .gpu/a/compiler.xz.* "$KEEP/" 2>/dev/null || true   # when everything came in one call
if ! [ -f "$KEEP/compiler.xz.a" ]; then
    echo "part a of TVM's library is missing: the machine went cold between the calls;" \
         "run 'gpu_check.sh stage' again first" >&2
    exit 3
fi
t0=$(date +%s)
rm -rf "$SITE" && mkdir -p "$SITE"
cat "$KEEP"/compiler.xz.* .gpu/b/compiler.xz.* 2>/dev/null > /tmp/compiler.xz
echo "$(cat .gpu/b/compiler.sha256)  /tmp/compiler.xz" | sha256sum -c - || exit 4
tar xJf .gpu/b/tvm_rest.tar.xz -C "$SITE"
xz -d -T0 -c /tmp/compiler.xz > "$SITE/tvm/lib/libtvm_compiler.so"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    .gpu/b/*.whl || exit 5
python3 -m pip install -q --no-index --no-deps --no-build-isolation --ignore-requires-python \
    --no-compile --upgrade --target "$SITE" . || exit 6
export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH
# a hung process prints every thread's stack on SIGABRT (sent below at the time limits);
# subprocesses (timing workers, compile helpers) inherit it
export PYTHONFAULTHANDLER=1
dlas() { python3 -c 'import sys; from dlas.cli import main; sys.exit(main())' "$@"; }
# Run "$@" for at most $1 seconds; past that, every process of its tree dumps its stacks
# (faulthandler, on SIGABRT) into the log before it is stopped.
limited() {
    local limit=$1; shift
    "$@" & local pid=$! waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$limit" ]; do
        sleep 1; waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "== past ${limit}s: stacks of every process, then stopped =="
        local tree="$pid $(pgrep -d' ' -P "$pid") $(for c in $(pgrep -P "$pid"); do pgrep -d' ' -P "$c"; done)"
        kill -ABRT $tree 2>/dev/null; sleep 3; kill -KILL $tree 2>/dev/null
    fi
    wait "$pid"
}
echo "installed in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 - <<'PY' 2>&1 | tee -a "$OUT/gpu.txt"
import sys, torch, tvm
from dlas.targets.options import local_cuda_gpu
print("python", sys.version.split()[0], "torch", torch.__version__, "tvm", tvm.__version__)
print("local_cuda_gpu", local_cuda_gpu())
PY
# The sweep first: its rows (each verified against the reference) are what a lent GPU is
# for; then the CUDA tests in the time left. SWEEP_S=0 or TESTS_S=0 skips a part.
# 1. the quickstart on the GPU: its models, every algorithm, the tuned points, PyTorch
run_sweep() {
# on the GPU, beside the plain CUDA target (each dense algorithm's tiled schedule): the
# same untuned TVM points replayed from a CUDA graph (`cuda_graph: true`), so launch cost
# and kernel cost show apart; each output's reduction split over a warp's lanes
# (`schedules: reduction`, replayed from a graph), the batch-1 schedule docs/gpu.md's third
# check called for; with BINDINGS=1, thread bindings only (`schedules: bindings`, measured
# in the third check); and PyTorch in its three modes
python3 - <<'PY' || { echo "could not write the GPU sweep config"; exit 7; }
import os
import yaml
config = yaml.safe_load(open("configs/quickstart.yaml"))
config["name"] = "quickstart_cuda"
# the untuned TVM variants beside the plain target, by label: the dense models only
extra = {"cuda(cuda_graph=True)": {"cuda_graph": True},
         "cuda(cuda_graph=True,schedules=reduction)": {"schedules": "reduction",
                                                      "cuda_graph": True}}
if os.environ.get("BINDINGS"):
    extra["cuda(schedules=bindings)"] = {"schedules": "bindings"}
config["targets"] = ["cuda"] + [{"name": "cuda", "params": p} for p in extra.values()]
for t in config["tuning"]:
    if isinstance(t, dict) and t.get("name") == "metaschedule":
        t["params"]["trials"] = 32
# a tuned sparse point beside the tuned dense one: the pruned ResNet18's gemm_csr, its row
# kernels searched in the GPU sparse space (threads per block, unrolling)
config["exclude"] = [rule for rule in config["exclude"]
                     if rule != {"tuning": "metaschedule", "compression": "weight_pruning"}]
for rule in config["exclude"]:
    if rule.get("tuning") == "metaschedule" and isinstance(rule.get("algorithms"), list):
        rule["algorithms"] = [a for a in rule["algorithms"] if a != "gemm_csr"]
config["exclude"].append({"tuning": "metaschedule", "compression": "weight_pruning",
                          "algorithms": "gemm"})
# PyTorch's other modes beside eager: replayed from a CUDA graph, and torch.compile
# (reduce-overhead: Inductor's kernels in CUDA graphs), on the dense models
graph_torch, compiled = "pytorch(mode=cuda_graph)", "pytorch(mode=compile)"
not_tvm_untuned = ["metaschedule", "onnxruntime", "pytorch", graph_torch, compiled]
config["tuning"] += [{"name": "pytorch", "params": {"mode": "cuda_graph"}},
                     {"name": "pytorch", "params": {"mode": "compile"}}]
config["exclude"] += [{"tuning": compiled, "compression": "weight_pruning"}]
for label in extra:
    config["exclude"] += [{"targets": label, "tuning": not_tvm_untuned},
                          {"targets": label, "compression": "weight_pruning"}]
# float16 beside float32 (issue 44: >= 1.3x on TVM's best): the dense models converted by
# TVM, its convs on tensor cores where the algorithm's GPU schedule has them; untuned, on
# the plain target (tiles) and the split reduction's
if os.environ.get("FP16", "1") != "0":
    config["compression"].append("float16")
    config["exclude"] += [
        {"compression": "float16", "tuning": not_tvm_untuned},
        {"compression": "float16",
         "targets": [label for label in extra if "reduction" not in label]},
        {"compression": "float16",
         "algorithms": ["direct(layout=NCHWc)", "direct_csr", "gemm_csr", "spatial_pack_csr"]}]
yaml.safe_dump(config, open("/tmp/quickstart_cuda.yaml", "w"), sort_keys=False)
PY
t2=$(date +%s)
limited "${SWEEP_S:-300}" python3 -c 'import sys; from dlas.cli import main; sys.exit(main())' \
    run /tmp/quickstart_cuda.yaml --workspace /tmp/ws --no-progress --passes "${PASSES:-1}" \
    > "$OUT/sweep.log" 2>&1
echo "sweep rc=$? took $(( $(date +%s) - t2 )) s"
tail -30 "$OUT/sweep.log"
dlas results --workspace /tmp/ws --columns \
    status,model,compression,algorithm,tuning,target,backend,latency_median_ms,latency_ci_low_ms,latency_ci_high_ms,verified,accuracy,compile_s,tuning_s,error \
    > "$OUT/results.txt" 2>&1
cat "$OUT/results.txt"
dlas results --workspace /tmp/ws --json > "$OUT/results.json" 2>&1
cp /tmp/ws/results.db "$OUT/" 2>/dev/null
# the study's table: every TVM and PyTorch mode beside PyTorch eager on this GPU
python3 benchmarks/gpu_study.py --db /tmp/ws/results.db 2>&1 | tee "$OUT/gpu_study.txt"
}
# 2. the tests that touch CUDA (the GPU-only ones, and the compile tests that run anywhere)
run_tests() {
t1=$(date +%s)
# pytest-timeout (in the image) fails a test past its limit with its stack, and goes on
limited "${TESTS_S:-200}" python3 -m pytest -rA -p no:cacheprovider -o addopts="" \
    --timeout "${TEST_S:-120}" tests/test_cuda_gpu.py tests/test_targets.py tests/test_baselines.py \
    -k "${TESTS_K:-cuda or gpu}" \
    > "$OUT/tests.log" 2>&1
tail -40 "$OUT/tests.log"
echo "tests took $(( $(date +%s) - t1 )) s"
}
[ "${SWEEP_S:-300}" = 0 ] || run_sweep
[ "${TESTS_S:-200}" = 0 ] || run_tests
exit 0

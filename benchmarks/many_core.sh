#!/usr/bin/env bash
# The many-core check: one short script for a borrowed machine with many cores (numpy, onnx, onnxruntime and
# gcc there; cffi and pycparser carried as wheels in .whl/, mxcc run from this checkout).
#
#   bash benchmarks/many_core.sh OUTDIR [THREADS [BASE]]   (THREADS default: 1,2,4,8,<cores>)
#
# BASE: a directory holding another version's mxcc/, runtime_c/ and templates/ (made here with `git archive REV
# mxcc runtime_c templates pyproject.toml | tar x -C .base`, carried along), for step 5.
#
# In order, each step's results written to OUTDIR as soon as it ends (a run cut short keeps what it did):
#  1. the machine: CPU model and flags, gcc, Python and the packages' versions; benchmarks/pool_jobs.c (what a
#     job costs apart from the kernels: the hand-off, FMA throughput with all threads busy, reading what another
#     core wrote), and with BASE, BASE's pool against this one's, 3 rounds alternating;
#  2. benchmarks/scaling.py: mxcc vs ORT, the five CNNs at batch 1 and 32 and the MLP at 1/64/256, for THREADS
#     (one round: ORT/mxcc per row; scaling.jsonl has every timing);
#  3. the split simulator against the real thing: for ResNet-18, ResNet-50 and MobileNet 1.0 at batch 1, the
#     compiled <net>_bench's per-kernel profile at 1 thread and at the most threads, and its simulation of the
#     most threads from chunks run one at a time (--simulate-threads): traces.tgz;
#  4. per layer against ORT at the most threads (benchmarks/cnn.py --layers) for ResNet-18, ResNet-50 and
#     MobileNet 1.0;
#  5. with BASE: the five CNNs at batch 1 built by BASE and by this checkout, each from its own directory
#     (`python3 -m mxcc` imports the package of the working directory before any on PYTHONPATH: a build run
#     from here with PYTHONPATH=BASE is this checkout's), `<net>_bench --threads T --seconds 1 --pool`
#     alternating, 5 rounds (the pool line says when the cap engaged), for T in $AB_THREADS (comma-separated;
#     default: the most threads).
set -u
out=${1:-many_core_out}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
export PYTHONUNBUFFERED=1 MXCC_CACHE_DIR=${MXCC_CACHE_DIR:-/tmp/mxcc-many-core-cache}
if [ -d .whl ] && ! python3 -c "import cffi" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
cores=$(nproc)
threads=${2:-}
base=${3:-}
if [ -z "$threads" ]; then
    threads=1; t=2
    while [ $t -lt "$cores" ]; do threads="$threads,$t"; t=$((t * 2)); done
    threads="$threads,$cores"
fi
most=${threads##*,}

echo "== machine"
date -u
echo "cores: $cores; threads: $threads"
grep -m1 "model name" /proc/cpuinfo
grep -m1 -E "^(cpu family|model)\s" /proc/cpuinfo; grep -m1 -E "^model\s" /proc/cpuinfo
grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512_vnni|avx512_bf16|amx_tile)$' | tr '\n' ' '; echo
lscpu 2>/dev/null | grep -E "Model name|L2|L3|Socket|NUMA node\(s\)"
gcc --version | head -1
python3 -c "import sys, numpy, onnxruntime, cffi; print(sys.version.split()[0], 'numpy', numpy.__version__, 'ORT', onnxruntime.__version__, 'cffi', cffi.__version__)" || exit 1
gcc -O3 -march=native -pthread -Iruntime_c/pool benchmarks/pool_jobs.c runtime_c/pool/pool.c -o /tmp/pool_jobs \
    && /tmp/pool_jobs "$most"
if [ -n "$base" ] && [ -f "$base/runtime_c/pool/pool.c" ] \
    && gcc -O3 -march=native -pthread -I"$base/runtime_c/pool" benchmarks/pool_jobs.c "$base/runtime_c/pool/pool.c" \
        -o /tmp/pool_jobs_base; then
    for r in 1 2 3; do   # the pool's own cost, BASE's and this checkout's alternating
        echo "pool_jobs base, round $r"; /tmp/pool_jobs_base "$most" | tail -n +3
        echo "pool_jobs this, round $r"; /tmp/pool_jobs "$most" | tail -n +3
    done
fi

echo "== scaling ($SECONDS s)"
python3 benchmarks/scaling.py --threads "$threads" --rounds 1 --json "$out/scaling.jsonl"

echo "== simulator vs real ($SECONDS s)"
work=$(mktemp -d)
for net in resnet18_v1 resnet50_v1 mobilenet1.0; do
    python3 -m mxcc compile "tests/data/models/$net/$net-symbol.json" --shape data=1,3,224,224 --random-params \
        --name "${net//./_}" -o "$work/$net" > /dev/null || continue
    b="$work/$net/${net//./_}_bench"
    "$b" --threads 1 --iters 30 --warmup 5 --profile "$work/${net}_prof1.json"
    "$b" --threads "$most" --iters 200 --warmup 20 --profile "$work/${net}_prof$most.json"
    "$b" --simulate-threads "$most" --simulate-json "$work/${net}_sim$most.json" | tail -1
done
tar czf "$out/traces.tgz" -C "$work" $(cd "$work" && ls *.json)

echo "== per layer vs ORT at $most threads ($SECONDS s)"
for net in resnet18_v1 resnet50_v1 mobilenet1.0; do
    python3 benchmarks/cnn.py --nets "$net" --batch 1 --layers 100 --threads "$most"
done
if [ -n "$base" ]; then
    ab_threads=${AB_THREADS:-$most}
    echo "== A/B at ${ab_threads} threads: $base vs this checkout ($SECONDS s)"
    ab=$(mktemp -d)
    here=$PWD
    for net in resnet18_v1 resnet50_v1 mobilenet1.0 mobilenetv2_1.0 squeezenet1.1; do
        js=$here/tests/data/models/$net/$net-symbol.json
        [ -f "$js" ] || js=$here/benchmarks/models/$net/$net-symbol.json
        (cd "$base" && python3 -m mxcc compile "$js" --shape data=1,3,224,224 --random-params --name x \
            -o "$ab/base_$net" > /dev/null) &
        python3 -m mxcc compile "$js" --shape data=1,3,224,224 --random-params --name x -o "$ab/this_$net" \
            > /dev/null &
        wait $!   # this checkout's build (the base build runs beside it)
    done
    wait_for=$(jobs -p); [ -n "$wait_for" ] && wait $wait_for
    for r in 1 2 3 4 5; do
        for t in ${ab_threads//,/ }; do
            for net in resnet18_v1 resnet50_v1 mobilenet1.0 mobilenetv2_1.0 squeezenet1.1; do
                for side in base this; do
                    [ -x "$ab/${side}_$net/x_bench" ] || continue
                    echo "$r $net $side $("$ab/${side}_$net/x_bench" --threads "$t" --seconds 1 --pool | tr '\n' ' ')"
                done
            done
        done
    done
fi
echo "== done ($SECONDS s)"

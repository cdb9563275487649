#!/usr/bin/env bash
# The whole GPU check in one run, for a machine with one H200 and no network (torch, triton,
# jinja2, pyyaml, click, pytest, pytest-xdist, matplotlib preinstalled):
#   compiled test matrix (bf16 included), full benchmark, training steps (forward+backward),
#   torch.compile side by side for the epilogue ops, time to first result.
# Everything lands under $OUT (default bench/out/h200-check); each step has its own time limit,
# so one slow step cannot take the others' results with it. All steps take about 30 minutes;
# STEPS picks some, to fit a machine lent by the call:
#
#   OUT=/tmp/check STEPS="build tests" bash bench/h200_check.sh     # over 9 minutes (3150 tests, 16 workers):
#   OUT=/tmp/check STEPS="build tests" TESTS=generated/tests bash bench/h200_check.sh  # so in two calls,
#   OUT=/tmp/check STEPS="tests" TESTS=tests bash bench/h200_check.sh                  # each under the limit
#   OUT=/tmp/check STEPS="tune build tests" TUNE="matmul --dtype float16 --shapes 1025x769x513" \
#       bash bench/h200_check.sh                                     # tune first, then as above
#   TUNE="matmul_residual_scaled --scope op --dtype float16"        # an op's own table (tables/ops/)
#   OUT=/tmp/check STEPS="bench" bash bench/h200_check.sh           # about 2 minutes
#   OUT=/tmp/check STEPS="bench" BENCH="matmul_relu --shapes 128x4096x4096" bash bench/h200_check.sh
#   OUT=/tmp/check STEPS="rounds" bash bench/h200_check.sh          # matmul, medians of 5 turns
#   OUT=/tmp/check STEPS="compile:matmul_relu" bash bench/h200_check.sh  # about 5 minutes (one op)
#   OUT=/tmp/check STEPS="host" BEFORE=.before bash bench/h200_check.sh  # host time, two trees
#   OUT=/tmp/check STEPS="backward" bash bench/h200_check.sh        # forward+backward, peak memory
#   OUT=/tmp/check STEPS="backward_loop" BACKWARD="add bias_gelu softmax" bash bench/h200_check.sh  # steps back to back
#   OUT=/tmp/check STEPS="node" BACKWARD="add --shapes 2^12,2^20" bash bench/h200_check.sh  # the node against the Function
#   OUT=/tmp/check STEPS="reductions:forward reductions:backward" bash bench/h200_check.sh  # about 6 minutes
#   OUT=/tmp/check STEPS="batched:forward batched:backward" bash bench/h200_check.sh   # about 3 minutes
#   OUT=/tmp/check STEPS="fp8" bash bench/h200_check.sh                  # about 3 minutes
#   OUT=/tmp/check STEPS="broadcast" bash bench/h200_check.sh            # about 2 minutes
#   OUT=/tmp/check STEPS="build second_derivative" bash bench/h200_check.sh  # create_graph=True: tests, a penalty's step
#   OUT=/tmp/check STEPS="float32" bash bench/h200_check.sh            # float32 matmuls: tests, probe, bench (about 2 minutes)
#   OUT=/tmp/check STEPS="build callpath" bash bench/h200_check.sh       # the compiled call path's tests alone
#   OUT=/tmp/check STEPS="func" bash bench/h200_check.sh                 # torch.func's transforms (about 2 minutes)
#   OUT=/tmp/check STEPS="reductions:forward_compile" REDUCE_SHAPES=16384x1024,32768x4096 bash bench/h200_check.sh
#   OUT=/tmp/check STEPS="reductions:tune build reductions:forward" bash bench/h200_check.sh  # about 8 minutes
#   OUT=/tmp/check STEPS="reductions:tune_backward build reductions:backward" REDUCTIONS="softmax log_softmax" \
#       REDUCE_SHAPES=4096x32768 REDUCE_TUNE_S=120 bash bench/h200_check.sh
#   OUT=/tmp/check STEPS="reductions:tests reductions:ab reductions:ab_backward" BEFORE=.before bash bench/h200_check.sh
#
# ARCHIVE=FILE packs everything into one .tar.gz at FILE when the steps are done (and removes
# the folder), for machines that hand back only a few files:
#   OUT=$OUT/check ARCHIVE=$OUT/check.tgz STEPS="build tests" bash bench/h200_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT:-bench/out/h200-check}"
steps=" ${STEPS:-build tests bench backward compile cold_start} "
mkdir -p "$out"

step() {  # step NAME SECONDS COMMAND...: run with a limit, log to $out/NAME.log, report the status
    # NAME is GROUP or GROUP:PART; STEPS may name either.
    local name=$1 limit=$2 log="$out/${1/:/_}.log"
    shift 2
    [[ $steps == *" $name "* || $steps == *" ${name%%:*} "* ]] || return 0
    timeout "$limit" "$@" > "$log" 2>&1
    echo "$name: exit $? ($(tail -1 "$log"))"
}

# tune (only when STEPS names it): TUNE holds tune's arguments; the new table lands in $out too,
# and the build step then renders it (instead of checking that generated/ is up to date).
# reductions:tune (only when STEPS names it) tunes each reduction op's own table at REDUCE_SHAPES
# (default the long rows: 4096x32768,512x32768,32768x4096), one op at a time with a limit each
# (REDUCE_TUNE_S, default 75 s), so one slow op leaves the others' keys written.
reductions="${REDUCTIONS:-softmax log_softmax rms_norm layer_norm add_rms_norm}"  # REDUCTIONS: some of them
if [[ $steps == *" reductions:tune "* ]]; then
    for op in $reductions; do
        timeout "${REDUCE_TUNE_S:-75}" python3 -m tilegen tune "$op" --scope op --jobs 14 ${REDUCE_TUNE_ARGS:-} \
            --shapes "${REDUCE_SHAPES:-4096x32768,512x32768,32768x4096}" > "$out/reductions_tune_$op.log" 2>&1
        echo "reductions:tune $op: exit $? ($(tail -1 "$out/reductions_tune_$op.log"))"
    done
fi
# reductions:tune_backward (only when STEPS names it) likewise tunes each one's backward kernel
# (`tilegen tune --backward`: tables/ops/<op>_backward.json), the backward of a training step timed.
# REDUCE_TUNE_ARGS (both tunes): more tune arguments (`--dtype float16 --dtype float32`: one dtype an element size).
if [[ $steps == *" reductions:tune_backward "* ]]; then
    for op in $reductions; do
        timeout "${REDUCE_TUNE_S:-75}" python3 -m tilegen tune "$op" --backward --jobs 14 ${REDUCE_TUNE_ARGS:-} \
            --shapes "${REDUCE_SHAPES:-4096x32768,512x32768,32768x4096}" > "$out/reductions_tune_backward_$op.log" 2>&1
        echo "reductions:tune_backward $op: exit $? ($(tail -1 "$out/reductions_tune_backward_$op.log"))"
    done
fi
if [[ $steps == *" tune "* || $steps == *" reductions:tune "* || $steps == *" reductions:tune_backward "* ]]; then
    [[ $steps == *" tune "* ]] && step tune 400 python3 -m tilegen tune ${TUNE:-matmul --dtype float16}
    cp tilegen/tables/*.json "$out/"
    [[ -d tilegen/tables/ops ]] && cp -r tilegen/tables/ops "$out/"
    step build 60 python3 -m tilegen build specs/
else
    step build 60 python3 -m tilegen build specs/ --check
fi
# -v: each result line names its test, so a run cut by its limit still says which failed;
# --durations: the slowest tests, to keep the matrix inside its limit (409 s of 540 on an H200 at bce681a, 518 s on an
# H100, whose tail was the other-node gradient run, since split in four parts). --dist worksteal: an idle
# worker takes queued tests from a busy one (at 0f66c90 the default scheduling left 25 of 3020, most of
# bmm_bias_silu's, queued on one worker when the limit struck: bench/results/h200/tests_0f66c90.log).
# TESTS: the paths to run (default: all). At 1b152a0 the whole matrix (3150 tests) passed the
# step's limit at 99% (bench/results/h200/tests_1b152a0.log): run it in two calls of the device,
# TESTS=generated/tests and TESTS=tests.
step tests 560 python3 -m pytest -v -n 16 --dist worksteal -p no:cacheprovider --durations=25 ${TESTS:-}
step bench 300 python3 -m tilegen bench ${BENCH:-} --out "$out/bench"  # BENCH: bench arguments (default: every op)
# The compiled call path's tests (callpath.cpp, and every launch style tuning may choose served
# by it): a quick check after a change to the native code (not a default step; `tests` has them).
step callpath 300 python3 -m pytest -v -n 16 -p no:cacheprovider tests/test_callpath.py
# A training step (forward+backward) of every op against eager autograd, with peak memory
# (about 6 minutes, every op); BACKWARD: bench arguments. backward_compile adds torch.compile (default and
# max-autotune), one step per kind on a shape set small enough for its compiles: over every
# default shape it takes about 9 s a point, past any one call's limit (64 of 163 points in 560 s).
step backward 560 python3 -m tilegen bench ${BACKWARD:-} --backward --out "$out/backward"
# backward_loop (not a default step): the same steps timed back to back (--timer loop: host time
# included, as a training loop waits for it), for the small steps whose lone-call times swing.
step backward_loop 560 python3 -m tilegen bench ${BACKWARD:-} --backward --timer loop --out "$out/backward_loop"
# The C++ autograd node (the default; TILEGEN_AUTOGRAD_NODE=0 takes torch.autograd.Function's):
# the gradient tests through each (the generated tests build the node before their first), then
# training steps through each, eager beside (host-bound at small shapes: what the node is for). The `backward` step above is the table through the node.
step node:tests 300 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_autograd.py tests/test_callpath.py \
    tests/test_runtime.py generated/tests -k "grad or backward or training or autograd or cuda_graph or node or forward_mode"
# torch.func's transforms (not a default step; `tests` has them): tests/test_func.py (compiled with
# inductor here), each op's generated vjp and jvp tests, and the node's error paths on autograd's
# device thread (a misshapen gradient, two threads through one node).
step func 240 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_func.py generated/tests \
    tests/test_autograd.py -k "torch_func or test_func or does_not_sum or two_threads"
step node:function_tests 240 env TILEGEN_AUTOGRAD_NODE=0 python3 -m pytest -q -n 16 -p no:cacheprovider generated/tests \
    -k "grad or backward or training or autograd or cuda_graph"
step node:backward 560 python3 -m tilegen bench ${BACKWARD:-} --backward --out "$out/node/backward"
step node:function_backward 560 env TILEGEN_AUTOGRAD_NODE=0 python3 -m tilegen bench ${BACKWARD:-} --backward \
    --out "$out/node/function_backward"
# COMPILE_DTYPES: their dtype arguments (default float16 alone, to fit both in one call's limit).
compile_dtypes="${COMPILE_DTYPES:---dtype float16}"
step backward_compile:elementwise 560 python3 -m tilegen bench add fma_clamp rms_scale_exp scaled_silu_mul \
    --shapes 2^16,2^24,2^26 $compile_dtypes --backward --compile --out "$out/backward_compile/elementwise"
step backward_compile:matmul 560 python3 -m tilegen bench matmul matmul_relu matmul_bias_gelu matmul_residual_scaled \
    --shapes 1024x1024x1024,4096x4096x4096 $compile_dtypes --backward --compile --out "$out/backward_compile/matmul"
# Reductions (softmax, log_softmax, rms_norm, layer_norm, add_rms_norm), forward and training step,
# against eager; the _compile steps add torch.compile (one compile per shape and dtype: REDUCE_SHAPES
# picks the shapes, default the benchmark's).
step reductions:tests 200 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_reductions.py \
    generated/tests/test_softmax.py generated/tests/test_log_softmax.py generated/tests/test_rms_norm.py \
    generated/tests/test_layer_norm.py generated/tests/test_add_rms_norm.py
# reductions:ab (not a default step): the forward at REDUCE_SHAPES (default the long rows) on BEFORE's
# kernels (a folder holding another tree's generated/: `git archive main generated | tar -x -C .before`,
# carried along) and on this tree's, in one run, eager and torch.compile beside this tree's. For
# kernel changes that keep the launch's constexprs (the runtime is this tree's for both).
before="${BEFORE:-.before}"
ab_shapes="${REDUCE_SHAPES:-4096x32768,512x32768,32768x4096}"
if [[ -d $before/generated ]]; then
    before=$(cd "$before" && pwd)
    step reductions:ab 560 bash -c "PYTHONPATH=$before:\$PYTHONPATH python3 -m tilegen bench $reductions \
        --shapes $ab_shapes --package $before/generated --out $out/reductions/ab_before && \
        python3 -m tilegen bench $reductions --shapes $ab_shapes --compile --out $out/reductions/ab"
    # The training step likewise (eager beside both; --compile adds about 9 s a point).
    step reductions:ab_backward 400 bash -c "PYTHONPATH=$before:\$PYTHONPATH python3 -m tilegen bench $reductions \
        --shapes $ab_shapes --backward --package $before/generated --out $out/reductions/ab_backward_before && \
        python3 -m tilegen bench $reductions --shapes $ab_shapes --backward --out $out/reductions/ab_backward"
else
    step reductions:ab 1 echo "no $before/generated: nothing to compare against"
    step reductions:ab_backward 1 echo "no $before/generated: nothing to compare against"
fi
step reductions:forward 300 python3 -m tilegen bench $reductions --out "$out/reductions/forward"
step reductions:backward 400 python3 -m tilegen bench $reductions --backward --out "$out/reductions/backward"
step reductions:forward_compile 560 python3 -m tilegen bench $reductions ${REDUCE_SHAPES:+--shapes $REDUCE_SHAPES} \
    --compile --out "$out/reductions/forward_compile"
step reductions:backward_compile 560 python3 -m tilegen bench $reductions ${REDUCE_SHAPES:+--shapes $REDUCE_SHAPES} \
    --backward --compile --out "$out/reductions/backward_compile"
# Batched matmul (bmm against torch.matmul, bmm_bias_silu against its eager composition): forward,
# training step, and torch.compile beside them (about 5 minutes; not default steps).
step batched:forward 300 python3 -m tilegen bench bmm bmm_bias_silu --out "$out/batched/forward"
step batched:backward 300 python3 -m tilegen bench bmm bmm_bias_silu --backward --out "$out/batched/backward"
step batched:compile 560 python3 -m tilegen bench bmm --compile --out "$out/batched/compile"
# fp8 matmul against torch._scaled_mm (precise and fast accumulation, row-wise and per-tensor scales;
# TFLOP/s, fraction of the fp8 peak), and the fp8 ops' bench (about 3 minutes; not default steps).
step fp8:probe 200 python3 bench/probes/fp8_scaled_mm.py "$out/fp8/probe"
step fp8:bench 200 python3 -m tilegen bench fp8_scaled_mm fp8_linear_gelu --out "$out/fp8/bench"
# Broadcast elementwise calls against same-shape ones, and with the strided kernel's blocks across
# lines (LINES off), eager and torch.compile beside (about 2 minutes; not a default step).
step broadcast 200 python3 bench/probes/broadcast_bandwidth.py "$out/broadcast"
# matmul against cuBLAS again, each point the median of five turns (about 2 minutes; not a default step).
step rounds 240 python3 -m tilegen bench matmul --rounds 5 --out "$out/matmul_rounds"
# max-autotune compiles each shape afresh (about 16 s a shape): one op per step, each about 5 minutes.
step compile:matmul_relu 420 python3 -m tilegen bench matmul_relu --compile --out "$out/compile/matmul_relu"
step compile:matmul_bias_gelu 420 python3 -m tilegen bench matmul_bias_gelu --compile --out "$out/compile/matmul_bias_gelu"
step compile:matmul_residual_scaled 420 python3 -m tilegen bench matmul_residual_scaled --compile --out "$out/compile/matmul_residual_scaled"
# Host time per call before and after the runtime library (BEFORE: a folder holding the older
# tree's package as generated_before; not a default step).
step host 300 env BEFORE="${BEFORE:-.before}" python3 bench/probes/host_before_after.py
# Second derivatives (create_graph=True): the generated gradient tests and the autograd tests,
# compiled, the C++ node included; then a gradient penalty's step against eager's.
step second_derivative:tests 390 python3 -m pytest -q -n 16 -p no:cacheprovider generated/tests tests/test_autograd.py \
    tests/test_runtime.py -k "second_derivative or create_graph or gradients_match or gradient_of_each or gradcheck or node or backward"
step second_derivative:probe 150 python3 bench/probes/second_derivative.py
step cold_start 200 python3 -m tilegen bench add --shapes 2^24 --cold-start matmul,add --out "$out/cold_start"
# float32 (not a default step): matmuls on float32 operands (`precision: ieee`, the FMA units) against
# SGEMM: their compiled tests, the probe (forward and training step, eager beside) and the bench
# (FLOAT32_BENCH: more bench arguments, `--compile` for torch.compile beside). float32:tune (only
# where STEPS names it) first runs `tilegen tune matmul --dtype float32` at FLOAT32_SHAPES for
# FLOAT32_TUNE_S (default 400) and builds: over 500 candidates a key, 200 s finished no key of five.
if [[ $steps == *" float32:tune "* ]]; then
    timeout "${FLOAT32_TUNE_S:-400}" python3 -m tilegen tune matmul --dtype float32 --jobs 14 \
        --shapes "${FLOAT32_SHAPES:-4096x4096x4096}" > "$out/float32_tune.log" 2>&1
    echo "float32:tune: exit $? ($(tail -1 "$out/float32_tune.log"))"
    cp tilegen/tables/matmul.json "$out/float32_matmul.json"
    step float32:tune 60 python3 -m tilegen build specs/
fi
step float32:tests 150 python3 -m pytest -q -n 16 -p no:cacheprovider generated/tests/test_matmul.py \
    generated/tests/test_matmul_relu.py generated/tests/test_matmul_bias_gelu.py generated/tests/test_bmm.py -k float32
step float32:probe 150 python3 bench/probes/float32_matmul.py
step float32:bench 200 python3 -m tilegen bench matmul_relu --dtype float32 \
    --shapes 4096x1024x1024,4096x4096x4096,16384x4096x4096 ${FLOAT32_BENCH:-} --out "$out/float32_bench"

if [[ -n "${ARCHIVE:-}" ]]; then
    # Packed beside the folder first: ARCHIVE may lie inside it (OUT=$OUT/x ARCHIVE=$OUT/x.tgz
    # expands ARCHIVE after OUT is set), and tar must not read the file it writes.
    packed="$(dirname "$out")/.h200_check.$$.tgz"
    tar czf "$packed" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out" &&
        mkdir -p "$(dirname "$ARCHIVE")" && mv "$packed" "$ARCHIVE" && echo "packed into $ARCHIVE"
fi

#!/usr/bin/env bash
# The whole GPU check in one run, for a machine with one H200 and no network (torch, triton,
# jinja2, pyyaml, click, pytest, pytest-xdist, matplotlib preinstalled):
#   compiled test matrix (bf16 included), full benchmark, torch.compile side by side for the
#   epilogue ops, time to first result.
# Everything lands under $OUT (default bench/out/h200-check); each step has its own time limit,
# so one slow step cannot take the others' results with it. All steps take about 15 minutes;
# STEPS picks some, to fit a machine lent by the call:
#
#   OUT=/tmp/check STEPS="build tests" bash bench/h200_check.sh     # about 4 minutes
#   OUT=/tmp/check STEPS="bench compile" bash bench/h200_check.sh   # about 5 minutes
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT:-bench/out/h200-check}"
steps=" ${STEPS:-build tests bench compile cold_start} "
mkdir -p "$out"

step() {  # step NAME SECONDS COMMAND...: run with a limit, log to $out/NAME.log, report the status
    local name=$1 limit=$2
    shift 2
    [[ $steps == *" $name "* ]] || return 0
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    echo "$name: exit $? ($(tail -1 "$out/$name.log"))"
}

step build 60 python3 -m tilegen build specs/ --check
step tests 300 python3 -m pytest -q -n 16 -p no:cacheprovider
step bench 300 python3 -m tilegen bench --out "$out/bench"
step compile 300 python3 -m tilegen bench matmul_relu matmul_bias_gelu --compile --out "$out/compile"
step cold_start 200 python3 -m tilegen bench add --shapes 2^24 --cold-start matmul,add --out "$out/cold_start"

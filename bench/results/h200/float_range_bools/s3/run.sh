# s3/ of README.md (the final tree: the traced workspace as c5d8ccc had it):
set -uo pipefail
export PYTHONPATH="$PWD"
out=$OUT/tw3; mkdir -p $out
timeout 200 python3 -m pytest -v -n 8 -p no:cacheprovider tests/test_runtime.py tests/test_callpath.py -k "share_memory or float_scalars_past or compiled_matmul_without or quoted_short or more_dims or scalar" > $out/tests.log 2>&1; echo "tests: $? $(tail -1 $out/tests.log)"

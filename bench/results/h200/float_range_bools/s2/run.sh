# s2/ of README.md (the tree with s1's two test fixes; .before from c5d8ccc, with this file in it):
set -uo pipefail
export PYTHONPATH="$PWD"
out=$OUT/tw2; mkdir -p $out
timeout 150 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_runtime.py -k "share_memory or float_scalars_past or compiled_matmul_without" > $out/tests.log 2>&1; echo "tests: $? $(tail -1 $out/tests.log)"
for tree in before after; do
  root=$PWD; [[ $tree == before ]] && root=$PWD/.before
  PYTHONPATH=$root PACKAGE=$root/generated timeout 100 python3 bench/probes/traced_launch.py matmul_relu 512x384x256 float16 > $out/probe_512x384x256_$tree.txt 2>&1
  echo "probe $tree: $? $(grep -c 'a call' $out/probe_512x384x256_$tree.txt)"
done

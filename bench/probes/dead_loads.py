"""Whether Triton drops a load whose value only an output not stored reads, in tilegen's own
backward kernels: each kernel compiled to Triton IR (the `ttir` stage, after its dead-code and
loop canonicalization; no GPU needed) for every STORES a call can ask for, counting the loads of
each input. A load the compiler keeps costs bandwidth and needs a gate in the kernel
(`if STORES & bits:`); one it drops costs nothing, and a gate there is for a stand-in's sake only
(an input kept as its shape alone is never addressed) and for the interpreter, which runs every
line. Pointers are taken as float32 tensors; the other specializations are the ones named below.

    PYTHONPATH=. python3 bench/probes/dead_loads.py             # this tree's generated/
    PYTHONPATH=OLD python3 bench/probes/dead_loads.py           # OLD: a folder holding another tree's
"""
import importlib
import inspect
import re

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from triton._C.libtriton import ir

# (module, kernel, its constexprs, the STORES to compare, what the gradients read)
CASES = [
    ("scaled_silu_mul", "_scaled_silu_mul_backward_kernel",
     dict(BLOCK=1024, EVEN=1, INDEX_64=0, MATH_64=0), (1, 2, 3),
     "bit 1: a's gradient, reads a and b; bit 2: b's, reads a"),
    ("layer_norm", "_layer_norm_backward_kernel",
     dict(BLOCK_N=4096, ROWS=1, ONE_TILE=0, UNROLL=1, AHEAD=0, INDEX_64=0, MATH_64=0, FIXED_N=0, EVICT=0,
          SHARED_FINISH=1, COLS=64, COL_ROWS=32), (1, 5, 7, 4),
     "bit 1: x's gradient (the row phase); bit 2: w's, summed over the rows from x and the incoming "
     "gradient (the column phase); bit 4: b's, the incoming gradient's sum (BitFit trains b alone)"),
]


def ttir(fn, constexprs):
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    signature = {}
    for param in fn.params:
        name = param.name
        if param.is_constexpr:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = "*fp32"
        elif "float64" in str(param.annotation):
            signature[name] = "fp64"
        else:
            signature[name] = "i32"
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    options = backend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                            context)
    stages = {}
    if len(inspect.signature(backend.add_stages).parameters) > 2:
        backend.add_stages(stages, options, source.language)
    else:
        backend.add_stages(stages, options)
    return str(stages["ttir"](module, {}))


def loads_of(text, pointers):
    """{pointer: how many tt.load ops read through it}: each load's address traced back through
    the splat / addptr / broadcast ops that build it from the kernel's argument."""
    defined = {}
    for line in text.splitlines():
        match = re.match(r"\s*(%[\w.#:]+)(?::\d+)? = (\S+) (.*)", line)
        if match:
            defined[match.group(1).split(":")[0]] = (match.group(2), match.group(3))
    counts = dict.fromkeys(pointers, 0)

    def root(value, depth=0):
        if value in pointers or depth > 50:
            return value
        op = defined.get(value)
        if op is None:
            return None
        for operand in re.findall(r"%[\w.#]+", op[1]):
            found = root(operand, depth + 1)
            if found in pointers:
                return found
        return None

    for name, (op, rest) in defined.items():
        if op == "tt.load":
            found = root(re.findall(r"%[\w.#]+", rest)[0])
            if found is not None:
                counts[found] += 1
    return counts


def main():
    package = "generated"
    import triton
    print("triton", triton.__version__)
    for module_name, kernel_name, constexprs, stores, note in CASES:
        module = importlib.import_module(f"{package}.{module_name}")
        fn = getattr(module, kernel_name)
        pointers = [f"%{p.name}" for p in fn.params if p.name.endswith("_ptr")]
        print(f"{kernel_name} of {module.__file__} ({note})")
        for bits in stores:
            counts = loads_of(ttir(fn, {**constexprs, "STORES": bits}), pointers)
            shown = ", ".join(f"{p[1:]} {c}" for p, c in counts.items() if c)
            print(f"  STORES {bits}: loads {shown}", flush=True)


if __name__ == "__main__":
    main()

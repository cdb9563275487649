"""What add's hot path would cost compiled against torch's C++ headers: one C++ function that
checks the call's signature (shapes, strides, dtype, device and 16-byte alignment of both inputs,
as the Python wrapper's `_signature`), allocates the output with at::empty_like, and launches
add's compiled binary (the very plan the wrapper made: function, grid, threads, shared memory)
through cuLaunchKernel. Timed beside add(a, b) and torch.add(a, b) on 4096 floats, in 9
interleaved rounds of 1000-call batches (medians), after checking its result.

Not part of the package: a measurement of what a C++ hot path would gain. It builds with g++
against this torch (about a minute); the real thing would also look the plan up in a table
and read the current stream itself (both well under 0.1 us in C++).
"""
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

# The times here are of launch plans: the compiled call path (_fastpath.py) stays off.
os.environ.setdefault("TILEGEN_FAST_PATH", "0")

import torch
import torch.utils.cpp_extension as cpp

import generated  # noqa: F401
from generated import _native, add
from host_timing import interleaved_medians

SOURCE = r"""
#include <torch/extension.h>
#include <dlfcn.h>
#include <cstdint>
#include <stdexcept>
#include <vector>

typedef int CUresult;
typedef CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              void *, void **, void **);
static launch_fn cu_launch = nullptr;

struct Plan {
    uint64_t function = 0;
    unsigned grid = 0, threads = 0, shared = 0;
    std::vector<int64_t> sizes, strides;
    at::ScalarType dtype;
    int device = -1;
};
static Plan plan;

void set_plan(const at::Tensor &a, uint64_t function, unsigned grid, unsigned threads, unsigned shared) {
    if (cu_launch == nullptr) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr || (cu_launch = (launch_fn)dlsym(lib, "cuLaunchKernel")) == nullptr)
            throw std::runtime_error("no libcuda");
    }
    plan.function = function;
    plan.grid = grid;
    plan.threads = threads;
    plan.shared = shared;
    plan.sizes = a.sizes().vec();
    plan.strides = a.strides().vec();
    plan.dtype = a.scalar_type();
    plan.device = a.get_device();
}

static bool matches(const at::Tensor &t) {
    return t.sizes() == at::IntArrayRef(plan.sizes) && t.strides() == at::IntArrayRef(plan.strides) &&
           t.scalar_type() == plan.dtype && t.get_device() == plan.device &&
           reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

at::Tensor hot_add(const at::Tensor &a, const at::Tensor &b, uint64_t stream) {
    if (!matches(a) || !matches(b))
        throw std::runtime_error("not the planned signature");
    at::Tensor c = at::empty_like(a);
    uint64_t slots[6] = {reinterpret_cast<uint64_t>(a.data_ptr()), reinterpret_cast<uint64_t>(b.data_ptr()),
                         reinterpret_cast<uint64_t>(c.data_ptr()), static_cast<uint64_t>(a.numel()), 0, 0};
    void *params[6] = {&slots[0], &slots[1], &slots[2], &slots[3], &slots[4], &slots[5]};
    CUresult result = cu_launch(reinterpret_cast<void *>(plan.function), plan.grid, 1, 1, plan.threads, 1, 1,
                                plan.shared, reinterpret_cast<void *>(stream), params, nullptr);
    if (result != 0)
        throw std::runtime_error("cuLaunchKernel failed: " + std::to_string(result));
    return c;
}

PYBIND11_MODULE(cpp_hot, m) {
    m.def("set_plan", &set_plan);
    m.def("hot_add", &hot_add);
}
"""


def build():
    folder = tempfile.mkdtemp(prefix="cpp_hot_")
    source, built = os.path.join(folder, "cpp_hot.cpp"), os.path.join(folder, "cpp_hot" + sysconfig.get_config_var("EXT_SUFFIX"))
    with open(source, "w") as handle:
        handle.write(SOURCE)
    libs = cpp.library_paths()[0]
    command = ["g++", "-O2", "-shared", "-fPIC", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
               *[f"-I{path}" for path in cpp.include_paths()], f"-I{sysconfig.get_paths()['include']}", source, "-o", built,
               f"-L{libs}", "-ltorch", "-ltorch_cpu", "-lc10", "-ltorch_python", f"-Wl,-rpath,{libs}", "-ldl"]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    print(f"built in {time.perf_counter() - start:.1f} s", flush=True)
    loader = importlib.machinery.ExtensionFileLoader("cpp_hot", built)
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location("cpp_hot", built, loader=loader))
    loader.exec_module(module)
    return module


hot = build()
add_mod = sys.modules["generated.add"]
a, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
add(a, b)
launch = next(iter(add_mod._CONFIGS.plans.values()))
function, grid, threads, shared, device, codes, varying, fixed = _native.load().describe(launch.plan)
assert codes == "pppipp" and grid[1:] == (1, 1), (codes, grid)
hot.set_plan(a, function, grid[0], threads, shared)
stream = torch.cuda.current_stream().cuda_stream
torch.testing.assert_close(hot.hot_add(a, b, stream), a + b, atol=0, rtol=0)
print("triton", __import__("triton").__version__, "torch", torch.__version__, "plan", (function, grid, threads, shared, codes))
callers = {
    "C++ hot path: hot_add(a, b, stream)": lambda: hot.hot_add(a, b, stream),
    "add(a, b) (native Launch plan)": lambda: add(a, b),
    "torch.add(a, b)": lambda: torch.add(a, b),
}
for name, (median, least) in interleaved_medians(callers).items():
    print(f"{name:40} {median:6.2f} us (min {least:.2f})", flush=True)

"""The compiled call path (generated/_fastpath.py): what a table learns, what it serves, and the
plans it fills. On the CPU the module is built for real and tables are tried on plans with no
programs (which launch nothing, driver or not) through `explain`; on a GPU the ops' repeat calls
are served there and checked against torch."""
import functools
import os
import shutil
import struct
import sys
from types import SimpleNamespace

import pytest
import torch

from generated import _fastpath, _native

pytestmark = pytest.mark.skipif(
    not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")) or
    not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")),
    reason="no C and C++ compilers to build the native launcher and the compiled call path with")

QUIET = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """(native launcher, compiled call path), built from source into a fresh cache."""
    cache = str(tmp_path_factory.mktemp("cache"))
    old = os.environ.get("TILEGEN_CACHE_DIR")
    os.environ["TILEGEN_CACHE_DIR"] = cache
    try:
        yield _native.import_built(), _fastpath.import_built()
    finally:
        if old is None:
            del os.environ["TILEGEN_CACHE_DIR"]
        else:
            os.environ["TILEGEN_CACHE_DIR"] = old


def table_with(modules, device=0, hooks=QUIET, streams=None):
    native, fast = modules
    streams = [] if streams is None else streams
    return fast.Table(native.API, lambda: device, lambda d: streams.append(d) or 77, hooks)


def empty_plan(native, codes, varying, tail=(), skip=0):
    """A native Launch of no programs: it launches nothing, so a table can be tried on the CPU."""
    plan = native.prepare(1, 0, 1, 1, 32, 0, 0, codes, varying, tail)
    return native.Launch(plan, skip, lambda: 0, lambda d: 0, QUIET, print)


def filled_values(native, plan):
    """Every 8-byte slot of an explained plan, in order."""
    return native.describe(plan)[-1]


def as_float(slot):
    return struct.unpack("<f", struct.pack("<Q", slot)[:4])[0]


def test_a_learned_call_is_served_with_fresh_outputs_and_its_own_values(modules):
    native, _ = modules
    table = table_with(modules)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    c = torch.empty(4, 5)
    launch = empty_plan(native, "pppfi", 4, (20,))
    assert table(a, b, 2.0) is None  # nothing learned yet
    assert table.learn((a, b, 2.0), (a, b, c, 2.0), launch.plan, launch.skip, c) is True
    # Other tensors of the same signature, another scalar value: served.
    a2, b2 = torch.randn(4, 5), torch.randn(4, 5)
    got, plan = table.explain(a2, b2, 0.5)
    assert got.shape == (4, 5) and got.dtype == torch.float32 and got.is_contiguous()
    values = filled_values(native, plan)
    assert values[:3] == (a2.data_ptr(), b2.data_ptr(), got.data_ptr())
    assert as_float(values[3]) == 0.5 and values[4] == 20  # the fixed value stays
    again, _ = table.explain(a2, b2, 0.5)
    assert again.data_ptr() != got.data_ptr()  # each call its own output
    assert isinstance(table(a2, b2, 0.5), torch.Tensor) and table.hits == 1


class Traced(torch.Tensor):
    """A tensor subclass: torch functions on it may do anything, so it takes the Python path."""


def test_only_the_learned_signature_is_served(modules):
    native, _ = modules
    table = table_with(modules)
    a, b, c = torch.randn(4, 5), torch.randn(4, 5), torch.empty(4, 5)
    launch = empty_plan(native, "pppf", 4)
    assert table.learn((a, b, 2.0), (a, b, c, 2.0), launch.plan, 0, c)
    base = torch.randn(64)
    offset = base[1:21].view(4, 5)  # the same layout, 4 bytes past a 16-byte boundary
    misses = {
        "other shape": (torch.randn(5, 4), b, 2.0),
        "other strides": (a.t().contiguous().t(), b, 2.0),
        "other dtype": (a.double(), b, 2.0),
        "misaligned": (offset, b, 2.0),
        "an int for a float": (a, b, 2),
        "a bool": (a, b, True),
        "a subclass": (a.as_subclass(Traced), b, 2.0),
        "a list": (a.tolist(), b, 2.0),
        "too few": (a, b),
        "too many": (a, b, 2.0, 1.0),
    }
    for name, args in misses.items():
        assert table(*args) is None, name
    assert table(a, b, scale=2.0) is None  # keywords: the Python path reads them
    assert table.hits == 0 and table(a, b, 7.5) is not None
    assert table(torch.nn.Parameter(a), b, 7.5) is not None  # a parameter is a plain tensor to torch too


def test_ints_are_told_apart_as_triton_specializes_them(modules):
    native, _ = modules
    table = table_with(modules)
    a, c = torch.randn(8), torch.empty(8)
    launch = empty_plan(native, "ppl", 3)
    for learned in (1, 48, 2**40 + 16):
        assert table.learn((a, learned), (a, c, learned), launch.plan, 0, c)
    assert table(a, 1) is not None and table(a, 2) is None  # small ints: each its own
    assert table(a, 32) is not None and table(a, 33) is None  # divisible by 16 or not
    assert table(a, 2**40 + 32) is not None and table(a, 2**31 + 16) is None  # above 32 bits or not
    assert table(a, 2**70) is None  # past 64 bits: never served
    _, plan = table.explain(a, 2**40 + 32)
    assert filled_values(native, plan)[2] == 2**40 + 32


def test_several_outputs_come_back_as_a_tuple_in_their_dtypes(modules):
    native, _ = modules
    table = table_with(modules)
    x, v = torch.randn(3, 7), torch.rand(3, 7)
    y, z = torch.empty(3, 7, dtype=torch.float16), torch.empty(3, 7)
    launch = empty_plan(native, "ppppf", 5)
    assert table.learn((x, v, 1e-6), (x, v, y, z, 1e-6), launch.plan, 0, (y, z))
    (got_y, got_z), plan = table.explain(x, v, 1e-5)
    assert got_y.dtype == torch.float16 and got_z.dtype == torch.float32 and got_y.shape == got_z.shape == (3, 7)
    assert filled_values(native, plan)[2:4] == (got_y.data_ptr(), got_z.data_ptr())


def test_learning_refuses_what_it_cannot_repeat(modules):
    native, _ = modules
    table = table_with(modules)
    a, c = torch.randn(4, 5), torch.empty(4, 5)
    launch = empty_plan(native, "ppf", 3)
    derived = 2.0 * 3  # a scalar the wrapper computed: not one of the call's arguments
    assert table.learn((a, 2.0), (a, c, derived), launch.plan, 0, c) is False
    assert table.learn((a, 2.0), (a, c.t(), 2.0), launch.plan, 0, c.t()) is False  # not contiguous
    assert table.learn((a, 2.0), (a, a, 2.0), launch.plan, 0, a) is False  # an input handed back
    assert table.learn((a, 2.0), (a, c), launch.plan, 0, c) is False  # another count of varying values
    assert table.learn((a, 2.0), (a, c, a), launch.plan, 0, c) is False  # a tensor in a float's slot
    assert table.learn((a, object()), (a, c, 2.0), launch.plan, 0, c) is False  # an argument it cannot key
    assert table.size() == 0
    with pytest.raises(TypeError, match="takes a plan from the native launcher"):
        table.learn((a, 2.0), (a, c, 2.0), b"not a plan", 0, c)
    # Leading plan arguments the binary does not take are skipped.
    skipping = empty_plan(native, "ppf", 3, skip=1)
    assert table.learn((a, 2.0), (None, a, c, 2.0), skipping.plan, skipping.skip, c) is True
    # None in a pointer's place is a null pointer on every call; in a scalar's, it cannot be.
    nulls = empty_plan(native, "pppf", 4)
    assert table.learn((a, 2.0), (None, a, c, 2.0), nulls.plan, 0, c) is True
    assert filled_values(native, table.explain(a, 3.0)[1])[0] == 0
    assert table.learn((a, 2.0), (a, c, None), launch.plan, 0, c) is False
    table.forget()
    assert table.size() == 0 and table(a, 2.0) is None


def test_calls_on_another_device_or_with_a_hook_listening_go_to_the_python_path(modules):
    native, _ = modules
    a, c = torch.randn(6), torch.empty(6)
    launch = empty_plan(native, "pp", 2)
    streams = []
    for device, hooks, served in [
        (0, QUIET, True),
        (0, SimpleNamespace(launch_enter_hook=SimpleNamespace(calls=[]), launch_exit_hook=None), True),
        (1, QUIET, False),
        (0, SimpleNamespace(launch_enter_hook=SimpleNamespace(calls=[print]), launch_exit_hook=None), False),
        (0, SimpleNamespace(launch_enter_hook=None, launch_exit_hook=print), False),
    ]:
        table = table_with(modules, device=device, hooks=hooks, streams=streams)
        assert table.learn((a,), (a, c), launch.plan, 0, c)
        assert (table(a) is not None) == served, (device, hooks)
    assert streams == [0, 0]  # the stream of the plan's device, read only for calls served
    broken = table_with(modules, hooks=object())
    broken.learn((a,), (a, c), launch.plan, 0, c)
    with pytest.raises(AttributeError):  # hooks without the attributes: the error is not swallowed
        broken(a)


def test_fast_path_learns_only_native_plans_and_forgets_with_the_plans(modules, monkeypatch):
    native, fast = modules
    monkeypatch.setattr(_native, "launch_context", lambda: (lambda: 0, lambda d: 0, QUIET))
    monkeypatch.setattr(_native, "loaded", lambda: native)
    monkeypatch.setattr(_fastpath, "load", lambda wait=False: fast)
    path = _fastpath.FastPath()
    a, c = torch.randn(6), torch.empty(6)
    assert path.call(a) is None and path.learn((a,), (a, c), print, c) is False and path.table is None
    assert path.learn((a,), (a, c), empty_plan(native, "pp", 2), c) is True
    assert path.call is path.table and path.call(a) is not None
    # A native plan with leading values bound (matmul's split-K buffers, None when unused).
    bound = functools.partial(empty_plan(native, "ppp", 3), None)
    assert path.learn((a, 1.0), (a, c), bound, c) is True
    assert filled_values(native, path.table.explain(a, 1.0)[1])[:2] == (0, a.data_ptr())
    path.forget()
    assert path.call(a) is None


def test_without_the_module_calls_stay_on_the_python_path_and_it_says_why_once(modules, monkeypatch):
    native, _ = modules
    monkeypatch.setattr(_native, "launch_context", lambda: (lambda: 0, lambda d: 0, QUIET))
    monkeypatch.setattr(_native, "loaded", lambda: native)
    monkeypatch.setattr(_fastpath, "load", lambda wait=False: None)
    monkeypatch.setattr(_fastpath, "UNAVAILABLE", "the compiled call path could not be built or loaded: no C++ compiler")
    monkeypatch.setattr(_fastpath, "_WARNED", False)
    path = _fastpath.FastPath()
    a, c = torch.randn(6), torch.empty(6)
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler; calls take the Python path"):
        assert path.learn((a,), (a, c), empty_plan(native, "pp", 2), c) is False
    assert path.learn((a,), (a, c), empty_plan(native, "pp", 2), c) is False  # once
    assert path.call(a) is None


def test_a_build_in_progress_elsewhere_is_waited_for_and_a_failed_one_reported(tmp_path, monkeypatch):
    path = str(tmp_path / "fast-x.so")
    open(path + ".lock", "w").close()
    assert _fastpath._start_build(path) is None  # another process holds the lock
    monkeypatch.setattr(_fastpath, "BUILD_WAIT_S", 0.3)
    with pytest.raises(OSError, match="did not finish"):
        _fastpath._wait_for(path, None)
    os.unlink(path + ".lock")
    with open(path + ".log", "w") as log:
        log.write("g++ ...\nfast.cpp:1: error: something")
    with pytest.raises(OSError, match="the build failed .*fast-x.so.log.: fast.cpp:1: error: something"):
        _fastpath._wait_for(path, None)
    # No compiler: no builder, and no lock left for others to wait on.
    monkeypatch.setattr(_fastpath, "build_command", lambda source, built: (_ for _ in ()).throw(OSError("no C++ compiler")))
    with pytest.raises(OSError, match="no C\\+\\+ compiler"):
        _fastpath._start_build(path)
    assert not os.path.exists(path + ".lock") and os.listdir(tmp_path) == ["fast-x.so.log"]
    # A lock older than a build can take is its dead builder's: taken over.
    open(path + ".lock", "w").close()
    os.utime(path + ".lock", (0, 0))
    monkeypatch.setattr(_fastpath, "build_command", lambda source, built: ["false"])
    builder = _fastpath._start_build(path)
    assert builder is not None
    builder.wait()
    assert not os.path.exists(path + ".lock") and not os.path.exists(path)


def test_the_module_is_loaded_in_a_thread_of_its_own(modules, monkeypatch):
    _, fast = modules  # built into this module's cache (TILEGEN_CACHE_DIR), so found there
    monkeypatch.delenv("TILEGEN_FAST_PATH", raising=False)
    monkeypatch.setattr(_fastpath, "_module", None)
    monkeypatch.setattr(_fastpath, "_loader", None)
    monkeypatch.setattr(_fastpath, "UNAVAILABLE", None)
    loaded = _fastpath.load(wait=True)
    assert loaded is not None and loaded.Table is fast.Table and _fastpath._loader.name == "tilegen-fast-path"
    assert _fastpath.load() is loaded  # once loaded, at once


def test_a_failed_load_is_remembered(tmp_path, monkeypatch):
    monkeypatch.delenv("TILEGEN_FAST_PATH", raising=False)
    monkeypatch.setattr(_fastpath, "_module", None)
    monkeypatch.setattr(_fastpath, "_loader", None)
    monkeypatch.setattr(_fastpath, "UNAVAILABLE", None)
    monkeypatch.setattr(_fastpath, "import_built", lambda: (_ for _ in ()).throw(OSError("no C++ compiler")))
    assert _fastpath.load(wait=True) is None
    assert _fastpath.UNAVAILABLE == "the compiled call path could not be built or loaded: no C++ compiler"
    loader = _fastpath._loader
    assert _fastpath.load() is None and _fastpath._loader is loader  # not tried again


def test_turned_off_it_never_builds(monkeypatch):
    monkeypatch.setenv("TILEGEN_FAST_PATH", "0")
    monkeypatch.setattr(_fastpath, "_module", None)
    monkeypatch.setattr(_fastpath, "_loader", None)
    monkeypatch.setattr(_fastpath, "UNAVAILABLE", None)
    assert _fastpath.load() is None and _fastpath.UNAVAILABLE == _fastpath.DISABLED and _fastpath._loader is None


def _gpu_cases():
    """(op, input shapes, the wrapper's arguments from the inputs, its scalars, the oracle) for
    every op: elementwise ones flat and strided, matmul ones with and without masks. A matmul with
    M = 16 takes split-K, and some configs load through tensor descriptors: plans the compiled path
    does not take, which must stay right all the same."""
    import torch.nn.functional as F

    def same(*inputs):
        return inputs

    def transposed(*inputs):
        return tuple(t.t() for t in inputs)

    def rms_scale_exp_oracle(x, v):
        return x * torch.rsqrt(v + 1e-6), torch.exp(-x.abs())

    flat, strided = [(4000,), (4000,)], [(130, 96), (130, 96)]
    return [
        ("add", flat, same, {}, lambda a, b: a + b),
        ("add", strided, transposed, {}, lambda a, b: a + b),
        ("scaled_silu_mul", flat, same, dict(alpha=0.5), lambda a, b: 0.5 * F.silu(a) * b),
        ("fma_clamp", flat, lambda a, b: (a, b, b), dict(lo=-0.5, hi=0.5), lambda a, b, c: (a * b + c).clamp(-0.5, 0.5)),
        ("rms_scale_exp", strided, lambda x, v: (x.t(), v.t().abs()), dict(eps=1e-6), rms_scale_exp_oracle),
        ("matmul_relu", [(96, 72), (72, 80)], same, {}, lambda a, b: torch.relu(a @ b)),
        ("matmul", [(256, 128), (192, 128)], lambda a, b: (a, b.t()), {}, lambda a, b: a @ b),
        ("matmul", [(16, 4096), (4096, 512)], same, {}, lambda a, b: a @ b),
        ("matmul_bias_gelu", [(100, 64), (64, 96), (96,)], same, {}, lambda a, b, bias: F.gelu(a @ b + bias)),
        ("matmul_residual_scaled", [(128, 256), (256, 128), (128, 128)], same, dict(alpha=0.5, beta=2.0),
         lambda x, w, r: 0.5 * (x @ w) + 2.0 * r),
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled call path launches on a GPU only")
@pytest.mark.parametrize("case", range(10))
def test_repeat_calls_are_served_compiled_and_stay_right(case):
    import generated as ops
    from generated.tests import _support as s

    if _fastpath.load(wait=True) is None or _native.load() is None:
        pytest.skip(f"no compiled call path here: {_fastpath.UNAVAILABLE or _native.UNAVAILABLE}")
    op, shapes, arguments, scalars, oracle = _gpu_cases()[case]
    module = sys.modules[f"generated.{op}"]
    for dtype in (torch.float16, torch.float32 if op != "matmul_residual_scaled" else torch.bfloat16):
        args = arguments(*[s.random(shape, dtype, seed) for seed, shape in enumerate(shapes)])
        getattr(ops, op)(*args, **scalars)  # the Python path serves it, and the table learns it
        plan = module._CONFIGS.plans[module._signature(*args, *scalars.values())]
        native = _fastpath.native_plan(plan, ()) is not None
        hits = module._FAST.table.hits if module._FAST.table is not None else 0
        for seed in range(3):  # other tensors of the same signature, and fresh outputs
            args = arguments(*[s.random(shape, dtype, 10 * seed + i + 10) for i, shape in enumerate(shapes)])
            got = getattr(ops, op)(*args, **scalars)
            want = oracle(*[t.float() for t in args])
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                assert g.dtype == dtype and g.is_contiguous(), op
                torch.testing.assert_close(g.float(), w, atol=5e-2, rtol=2e-2, msg=op)
        served = module._FAST.table.hits - hits if module._FAST.table is not None else 0
        assert served == (3 if native else 0), (op, shapes, dtype, type(plan))
        if op in ("add", "scaled_silu_mul", "fma_clamp", "rms_scale_exp", "matmul_relu"):
            assert served == 3, (op, "the plain plans of these shapes are native ones")

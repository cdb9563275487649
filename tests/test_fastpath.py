"""The compiled call path (generated/_fastpath.py): what a table learns, what it serves, and the
plans it fills. On the CPU the module is built for real and tables are tried on plans with no
programs (which launch nothing, driver or not) through `explain`; on a GPU the ops' repeat calls
are served there and checked against torch."""
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
    # A lock older than a build can take is its dead builder's: taken over.
    open(path + ".lock", "w").close()
    os.utime(path + ".lock", (0, 0))
    monkeypatch.setattr(_fastpath, "build_command", lambda source, built: ["false"])
    builder = _fastpath._start_build(path)
    assert builder is not None
    builder.wait()
    assert not os.path.exists(path + ".lock") and not os.path.exists(path)


def test_turned_off_it_never_builds(monkeypatch):
    monkeypatch.setenv("TILEGEN_FAST_PATH", "0")
    monkeypatch.setattr(_fastpath, "_module", None)
    monkeypatch.setattr(_fastpath, "_loader", None)
    monkeypatch.setattr(_fastpath, "UNAVAILABLE", None)
    assert _fastpath.load() is None and _fastpath.UNAVAILABLE == _fastpath.DISABLED and _fastpath._loader is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled call path launches on a GPU only")
def test_repeat_calls_of_every_elementwise_op_are_served_compiled_and_stay_right():
    import torch.nn.functional as F

    import generated as ops
    from generated.tests import _support as s

    if _fastpath.load(wait=True) is None or _native.load() is None:
        pytest.skip(f"no compiled call path here: {_fastpath.UNAVAILABLE or _native.UNAVAILABLE}")

    def fresh(shape, dtype, seed):
        return s.random(shape, dtype, seed)

    def rms_scale_exp_oracle(x, v):
        return x * torch.rsqrt(v + 1e-6), torch.exp(-x.abs())

    cases = [
        ("add", lambda a, b: ops.add(a, b), lambda a, b: (a.float() + b.float(),)),
        ("scaled_silu_mul", lambda a, b: ops.scaled_silu_mul(a, b, alpha=0.5),
         lambda a, b: (0.5 * F.silu(a.float()) * b.float(),)),
        ("fma_clamp", lambda a, b: ops.fma_clamp(a, b, b, lo=-0.5, hi=0.5),
         lambda a, b: ((a.float() * b.float() + b.float()).clamp(-0.5, 0.5),)),
        ("rms_scale_exp", lambda a, b: ops.rms_scale_exp(a, b.abs()), lambda a, b: rms_scale_exp_oracle(a.float(), b.abs().float())),
    ]
    for op, call, oracle in cases:
        table_owner = sys.modules[f"generated.{op}"]._FAST
        for dtype in (torch.float16, torch.float32):
            for shape, layout in [((4000,), lambda t: t), ((96, 130), lambda t: t.t().contiguous().t())]:
                a, b = layout(fresh(shape, dtype, 0)), layout(fresh(shape, dtype, 1))
                call(a, b)  # the Python path serves it, and the table learns it
                hits = table_owner.table.hits if table_owner.table is not None else 0
                for seed in range(2, 5):  # other tensors of the signature: served compiled
                    a, b = layout(fresh(shape, dtype, seed)), layout(fresh(shape, dtype, seed + 10))
                    got = call(a, b)
                    got = got if isinstance(got, tuple) else (got,)
                    for g, w in zip(got, oracle(a, b)):
                        assert g.shape == a.shape and g.dtype == dtype and g.is_contiguous(), op
                        torch.testing.assert_close(g.float(), w, atol=2e-2, rtol=2e-2, msg=op)
                assert table_owner.table.hits == hits + 3, (op, dtype, shape)

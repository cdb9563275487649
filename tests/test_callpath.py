"""The compiled call path (tilegen/runtime/csrc/callpath.cpp) and the one mechanism that builds
native code (tilegen/runtime/native.py).

On the CPU the module is built for real, with warnings on, into a fresh cache, and tables are
tried on plans with no programs (which launch nothing, driver or not) through `explain`; on a GPU
the ops' repeat calls are served there and checked against torch."""
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
import unittest.mock
from types import SimpleNamespace

import pytest
import torch

import tilegen.runtime as rt
from tilegen.runtime import callpath, native
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")),
                                reason="no C++ compiler to build the compiled call path with")

QUIET = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the module, the path it was built to, the compiler's warnings), from source into a fresh cache."""
    cache = tmp_path_factory.mktemp("cache")
    os.chmod(cache, 0o700)
    old = os.environ.get("TILEGEN_CACHE_DIR")
    os.environ["TILEGEN_CACHE_DIR"] = str(cache)
    try:
        path, warnings = native.build("callpath")
        yield native.load("callpath"), path, warnings
    finally:
        if old is None:
            del os.environ["TILEGEN_CACHE_DIR"]
        else:
            os.environ["TILEGEN_CACHE_DIR"] = old


@pytest.fixture
def module(built):
    return built[0]


def test_the_build_has_no_warnings(built):
    _, path, warnings = built
    assert warnings == "", warnings
    assert os.path.basename(path).startswith("callpath-") and os.path.isfile(path + ".sha256")


def table_with(module, device=0, hooks=QUIET, streams=None, stream=77):
    streams = [] if streams is None else streams
    return module.Table(lambda: device, lambda d: streams.append(d) or stream, hooks)


def empty_plan(module, codes, varying, tail=()):
    """A plan of no programs: it launches nothing, so a table can be tried on the CPU."""
    return module.prepare(1, 0, 1, 1, 32, 0, 0, codes, varying, tail)


def filled_values(module, plan):
    """Every 8-byte slot of an explained plan, in order."""
    return module.describe(plan)[-1]


def as_float(slot):
    return struct.unpack("<f", struct.pack("<Q", slot)[:4])[0]


def test_prepare_converts_fixed_values_once(module):
    t = torch.zeros(4)
    plan = module.prepare(99, 8, 2, 1, 256, 49152, 0, "pifdlpH", 2, (0.5, 0.25, 2**40, t, 65535))
    function, grid, threads, shared, device, codes, varying, fixed = module.describe(plan)
    assert (function, grid, threads, shared, device, codes, varying) == (99, (8, 2, 1), 256, 49152, 0, "pifdlpH", 2)
    # Each fixed value as the kernel reads it from the start of its 8-byte slot.
    assert struct.pack("<Q", fixed[0])[:4] == struct.pack("<f", 0.5)
    assert struct.pack("<Q", fixed[1]) == struct.pack("<d", 0.25)
    assert fixed[2] == 2**40 and fixed[3] == t.data_ptr() and fixed[4] == 65535
    assert module.describe(module.prepare(1, 1, 1, 1, 32, 0, 0, "pi", 1, (-3,)))[-1] == (2**32 - 3,)


def test_prepare_refuses_what_it_cannot_pass(module):
    prepare = module.prepare
    with pytest.raises(ValueError, match="unknown type code 'z'"):
        prepare(1, 1, 1, 1, 32, 0, 0, "pz", 1, (None,))
    with pytest.raises(OverflowError, match="does not fit in 32 bits"):
        prepare(1, 1, 1, 1, 32, 0, 0, "pi", 1, (2**31,))
    with pytest.raises(OverflowError, match="does not fit in 16 bits"):
        prepare(1, 1, 1, 1, 32, 0, 0, "pH", 1, (2**16,))
    with pytest.raises(ValueError, match="3 type codes for 1 varying and 1 fixed"):
        prepare(1, 1, 1, 1, 32, 0, 0, "ppi", 1, (4,))
    with pytest.raises(ValueError, match="at most"):
        prepare(1, 1, 1, 1, 32, 0, 0, "p" * 200, 200, ())


def test_a_learned_call_is_served_with_fresh_outputs_and_its_own_values(module):
    table = table_with(module)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    c = torch.empty(4, 5)
    plan = empty_plan(module, "pppfi", 4, (20,))
    assert table(a, b, 2.0) is None  # nothing learned yet
    assert table.learn((a, b, 2.0), (a, b, c, 2.0), plan, 0, c, 77) is True
    # Other tensors of the same signature, another scalar value: served.
    a2, b2 = torch.randn(4, 5), torch.randn(4, 5)
    got, filled = table.explain(a2, b2, 0.5)
    assert got.shape == (4, 5) and got.dtype == torch.float32 and got.is_contiguous()
    values = filled_values(module, filled)
    assert values[:3] == (a2.data_ptr(), b2.data_ptr(), got.data_ptr())
    assert as_float(values[3]) == 0.5 and values[4] == 20  # the fixed value stays
    again, _ = table.explain(a2, b2, 0.5)
    assert again.data_ptr() != got.data_ptr()  # each call its own output
    assert isinstance(table(a2, b2, 0.5), torch.Tensor) and table.hits == 1


def test_a_models_parameters_are_learned_and_served_as_tensors_are(module):
    # A model's weights are nn.Parameters: a call with one is learned and served (under no_grad,
    # as inference runs; with grad mode on, autograd's), a tensor subclass is not.
    table = table_with(module)
    x, w, c = torch.randn(4, 5), torch.nn.Parameter(torch.randn(4, 5)), torch.empty(4, 5)
    with torch.no_grad():
        assert table.learn((x, w), (x, w, c), empty_plan(module, "ppp", 3), 0, c, 77) is True
        w2 = torch.nn.Parameter(torch.randn(4, 5))
        got, filled = table.explain(x, w2)
        assert filled_values(module, filled)[1] == w2.data_ptr()
    assert table.explain(x, w2) is None  # it requires grad, grad mode is on: autograd's call

    class Marked(torch.Tensor):
        pass
    with torch.no_grad():
        assert table.explain(x, torch.randn(4, 5).as_subclass(Marked)) is None


def test_a_view_of_an_argument_starting_where_it_does_reads_the_arguments_pointer(module):
    """A broadcast input is launched as an expanded view: later calls read their own argument's
    pointer in its place, where a tensor the call does not pass is held (and read again)."""
    table = table_with(module)
    x, row = torch.randn(4, 5), torch.randn(5)
    out = torch.empty(4, 5)
    plan = empty_plan(module, "pppi", 3, (20,))
    assert table.learn((x, row), (x, row.expand(4, 5), out), plan, 0, out, 77) is True
    x2, row2 = torch.randn(4, 5), torch.randn(5)
    got, filled = table.explain(x2, row2)
    assert filled_values(module, filled)[:3] == (x2.data_ptr(), row2.data_ptr(), got.data_ptr())
    # A view starting elsewhere (a slice past the first element) is not the argument's pointer.
    table.forget()
    held = torch.randn(6)[1:]
    assert table.learn((x, row), (x, held, out), plan, 0, out, 77) is True
    assert filled_values(module, table.explain(x2, row2)[1])[1] == held.data_ptr()
    # Its bytes read as another dtype are the argument still; a view reaching past its end (the
    # tensor it was cut from) is not: a later call's argument need not extend so far.
    table.forget()
    assert table.learn((x, row), (x, row.view(torch.uint8), out), plan, 0, out, 77) is True
    assert filled_values(module, table.explain(x2, row2)[1])[1] == row2.data_ptr()
    table.forget()
    whole = torch.randn(10)
    assert table.learn((x, whole[:5]), (x, whole, out), plan, 0, out, 77) is True
    assert filled_values(module, table.explain(x2, row2)[1])[1] == whole.data_ptr()  # held, not row2's


class Traced(torch.Tensor):
    """A tensor subclass: torch functions on it may do anything, so it takes the Python path."""


def test_a_tensor_map_is_encoded_for_each_calls_address_its_shape_and_strides_fixed(module):
    """A launch through a tensor descriptor takes the map (encoded per call: `explain` shows the
    address it would be encoded for) and the descriptor's shape and strides, which the signature
    fixes. The map's tensor can be a view of an argument starting where it does (a transpose)."""
    table = table_with(module)
    a, c = torch.randn(8, 16), torch.empty(16, 8)
    encoding = (a.t(), 7, (16, 8), (1,), (8, 4), 3, 0)  # a column-major view: strides (1, 16)
    plan = empty_plan(module, "Diillp", 6)
    assert table.learn((a,), (encoding, (16,), (8,), (1,), (16,), c), plan, 0, c, 77) is True
    a2 = torch.randn(8, 16)
    got, filled = table.explain(a2)
    assert filled_values(module, filled) == (a2.data_ptr(), 16, 8, 1, 16, got.data_ptr())
    # A map of a tensor the call does not pass, or one packed wrong, is not learned.
    table.forget()
    for wrong in ((torch.randn(8, 16), *encoding[1:]), encoding[:6], (a, 7, (), (), (), 3, 0),
                  (a, 7, (16, 8), (1, 1), (8, 4), 3, 0), (a, 7, (16, -8), (1,), (8, 4), 3, 0)):
        assert table.learn((a,), (wrong, (16,), (8,), (1,), (16,), c), plan, 0, c, 77) is False
    assert table.learn((a,), (a, (16,), (8,), (1,), (16,), c), plan, 0, c, 77) is False  # a pointer is no map
    with pytest.raises(ValueError, match="tensor map is encoded per call"):
        module.prepare(1, 0, 1, 1, 32, 0, 0, "pD", 1, (None,))


def test_the_call_path_learns_a_launch_through_a_tensor_descriptor(module, monkeypatch):
    """callpath.learn packs a triton TensorDescriptor as Triton's launcher encodes it: CUDA's data
    type, the compiler's box and swizzle, its strides in elements less the innermost."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    _quiet_call_path(monkeypatch, module)
    path = callpath.CallPath()
    a, c = torch.randn(8, 16, dtype=torch.float16), torch.empty(8, 16, dtype=torch.float16)
    binary = _fake_binary({"a_desc": "tensordesc<fp16[4, 8]>", "c_ptr": "*fp16", "BLOCK": "constexpr"},
                          tensordesc_meta=[dict(_MAP_META, block_size=[4, 8], elem_type=9)])
    launched = rt.launch.Launched(binary, ["a_desc", "c_ptr", "BLOCK"], (1,),
                                  (TensorDescriptor.from_tensor(a, [4, 8]), c), 2, 0)
    assert path.learn((a,), launched, c) is True
    a2 = torch.randn(8, 16, dtype=torch.float16)
    got, filled = path.table.explain(a2)
    assert filled_values(module, filled) == (a2.data_ptr(), 8, 16, 16, 1, got.data_ptr(), 0, 0)  # (scratch: null)


def test_a_tensor_map_over_a_view_of_an_output_is_encoded_for_each_calls_output(module, monkeypatch):
    """A batched output stored through a 3-D descriptor is described over a view of the result
    ([matrices, rows, cols]), not the result object itself: the map's base is that output, so
    each call's map is encoded for the address of the output it allocates."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    _quiet_call_path(monkeypatch, module)
    path = callpath.CallPath()
    a, c = torch.randn(2, 8, 16, dtype=torch.float16), torch.empty(2, 8, 16, dtype=torch.float16)
    binary = _fake_binary({"a_ptr": "*fp16", "c_desc": "tensordesc<fp16[1, 4, 8]>", "BLOCK": "constexpr"},
                          tensordesc_meta=[dict(_MAP_META, block_size=[1, 4, 8], elem_type=9)])
    view = c.view(2, 8, 16)
    assert view is not c
    launched = rt.launch.Launched(binary, ["a_ptr", "c_desc", "BLOCK"], (1,),
                                  (a, TensorDescriptor.from_tensor(view, [1, 4, 8])), 2, 0)
    assert path.learn((a,), launched, c) is True
    a2 = torch.randn(2, 8, 16, dtype=torch.float16)
    got, filled = path.table.explain(a2)
    assert got.shape == c.shape and got.data_ptr() != c.data_ptr()
    assert filled_values(module, filled) == (a2.data_ptr(), got.data_ptr(), 2, 8, 16, 128, 16, 1, 0, 0)
    # A view that starts elsewhere in the output, or reaches past its end (the tensor it was cut
    # from), is no such map: the call is not learned.
    path.forget()
    tail = TensorDescriptor.from_tensor(c[1:], [1, 4, 8])
    launched = rt.launch.Launched(binary, ["a_ptr", "c_desc", "BLOCK"], (1,), (a, tail), 2, 0)
    assert path.learn((a,), launched, c) is False
    whole = torch.empty(4, 8, 16, dtype=torch.float16)
    first = whole[:2]
    launched = rt.launch.Launched(binary, ["a_ptr", "c_desc", "BLOCK"], (1,),
                                  (a, TensorDescriptor.from_tensor(whole, [1, 4, 8])), 2, 0)
    assert path.learn((a,), launched, first) is False


def test_only_the_learned_signature_is_served(module):
    table = table_with(module)
    a, b, c = torch.randn(4, 5), torch.randn(4, 5), torch.empty(4, 5)
    assert table.learn((a, b, 2.0), (a, b, c, 2.0), empty_plan(module, "pppf", 4), 0, c, 77)
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
        "requires grad": (a.clone().requires_grad_(), b, 2.0),
    }
    for name, args in misses.items():
        assert table(*args) is None, name
    assert table(a, b, scale=2.0) is None  # keywords: the Python path reads them
    assert table.hits == 0 and table(a, b, 7.5) is not None
    assert table(torch.nn.Parameter(a, requires_grad=False), b, 7.5) is not None  # a plain tensor to torch
    with torch.no_grad():  # nothing to record: a tensor that requires grad is served too
        assert table(a.clone().requires_grad_(), b, 7.5) is not None
        assert table(torch.nn.Parameter(a.clone()), b, 7.5) is not None


def test_ints_are_told_apart_as_triton_specializes_them(module):
    table = table_with(module)
    a, c = torch.randn(8), torch.empty(8)
    plan = empty_plan(module, "ppl", 3)
    for learned in (1, 48, 2**40 + 16):
        assert table.learn((a, learned), (a, c, learned), plan, 0, c, 77)
    assert table(a, 1) is not None and table(a, 2) is None  # small ints: each its own
    assert table(a, 32) is not None and table(a, 33) is None  # divisible by 16 or not
    assert table(a, 2**40 + 32) is not None and table(a, 2**31 + 16) is None  # above 32 bits or not
    assert table(a, 2**70) is None  # past 64 bits: never served
    _, filled = table.explain(a, 2**40 + 32)
    assert filled_values(module, filled)[2] == 2**40 + 32


def test_a_scalar_the_kernel_cannot_take_goes_to_the_python_path(module):
    table = table_with(module)
    a, c = torch.randn(8), torch.empty(8)
    assert table.learn((a, 1.0), (a, c, 1.0), empty_plan(module, "ppf", 3), 0, c, 77)
    assert table(a, 3e38) is not None and table(a, float("inf")) is not None
    assert table(a, 1e300) is None  # past float32: the wrapper's check raises the named error


def test_several_outputs_come_back_as_a_tuple_in_their_dtypes(module):
    table = table_with(module)
    x, v = torch.randn(3, 7), torch.rand(3, 7)
    y, z = torch.empty(3, 7, dtype=torch.float16), torch.empty(3, 7)
    assert table.learn((x, v, 1e-6), (x, v, y, z, 1e-6), empty_plan(module, "ppppf", 5), 0, (y, z), 77)
    (got_y, got_z), filled = table.explain(x, v, 1e-5)
    assert got_y.dtype == torch.float16 and got_z.dtype == torch.float32 and got_y.shape == got_z.shape == (3, 7)
    assert filled_values(module, filled)[2:4] == (got_y.data_ptr(), got_z.data_ptr())


def test_learning_refuses_what_it_cannot_repeat(module):
    table = table_with(module)
    a, c = torch.randn(4, 5), torch.empty(4, 5)
    plan = empty_plan(module, "ppf", 3)
    derived = 2.0 * 3  # a scalar the wrapper computed: not one of the call's arguments
    assert table.learn((a, 2.0), (a, c, derived), plan, 0, c, 77) is False
    assert table.learn((a, 2.0), (a, c.t(), 2.0), plan, 0, c.t(), 77) is False  # not contiguous
    assert table.learn((a, 2.0), (a, a, 2.0), plan, 0, a, 77) is False  # an input handed back
    assert table.learn((a, 2.0), (a, c), plan, 0, c, 77) is False  # another count of varying values
    assert table.learn((a, 2.0), (a, c, a), plan, 0, c, 77) is False  # a tensor in a float's slot
    assert table.learn((a, object()), (a, c, 2.0), plan, 0, c, 77) is False  # an argument it cannot key
    assert table.size() == 0
    with pytest.raises(TypeError, match="takes a plan from prepare"):
        table.learn((a, 2.0), (a, c, 2.0), b"not a plan", 0, c, 77)
    # Leading launch arguments the binary does not take are skipped.
    assert table.learn((a, 2.0), (None, a, c, 2.0), plan, 1, c, 77) is True
    # None in a pointer's place is a null pointer on every call; in a scalar's, it cannot be.
    nulls = empty_plan(module, "pppf", 4)
    assert table.learn((a, 2.0), (None, a, c, 2.0), nulls, 0, c, 77) is True
    assert filled_values(module, table.explain(a, 3.0)[1])[0] == 0
    assert table.learn((a, 2.0), (a, c, None), plan, 0, c, 77) is False
    table.forget()
    assert table.size() == 0 and table(a, 2.0) is None


def test_scratch_tensors_are_held_and_serve_only_their_stream(module):
    """A split-K launch reads a workspace that is neither an argument nor an output: the entry
    keeps it, and serves calls on the stream it was learned on only."""
    a, c = torch.randn(6), torch.empty(6)
    sums, counters = torch.empty(64), torch.zeros(8, dtype=torch.int32)
    plan = empty_plan(module, "pppp", 4)
    on_77 = table_with(module, stream=77)
    assert on_77.learn((a,), (sums, counters, a, c), plan, 0, c, 77)
    del sums  # the entry holds it
    got, filled = on_77.explain(a)
    values = filled_values(module, filled)
    assert values[1] == counters.data_ptr() and values[2:] == (a.data_ptr(), got.data_ptr())
    on_78 = table_with(module, stream=78)
    assert on_78.learn((a,), (torch.empty(64), counters, a, c), plan, 0, c, 77)
    assert on_78(a) is None  # another stream: the Python path finds that stream's workspace


def test_calls_on_another_device_or_with_a_hook_listening_go_to_the_python_path(module):
    a, c = torch.randn(6), torch.empty(6)
    plan = empty_plan(module, "pp", 2)
    streams = []
    for device, hooks, served in [
        (0, QUIET, True),
        (0, SimpleNamespace(launch_enter_hook=SimpleNamespace(calls=[]), launch_exit_hook=None), True),
        (1, QUIET, False),
        (0, SimpleNamespace(launch_enter_hook=SimpleNamespace(calls=[print]), launch_exit_hook=None), False),
        (0, SimpleNamespace(launch_enter_hook=None, launch_exit_hook=print), False),
    ]:
        table = table_with(module, device=device, hooks=hooks, streams=streams)
        assert table.learn((a,), (a, c), plan, 0, c, 77)
        assert (table(a) is not None) == served, (device, hooks)
    assert streams == [0, 0]  # the stream of the plan's device, read only for calls served
    broken = table_with(module, hooks=object())
    broken.learn((a,), (a, c), plan, 0, c, 77)
    with pytest.raises(AttributeError):  # hooks without the attributes: the error is not swallowed
        broken(a)


def _fake_binary(signature, **metadata):
    """A compiled kernel as the call path reads it: its signature and metadata."""
    fields = dict(num_ctas=1, global_scratch_size=0, profile_scratch_size=0, num_warps=4, shared=1024)
    fields.update(metadata)
    return SimpleNamespace(src=SimpleNamespace(signature=signature), metadata=SimpleNamespace(**fields),
                           function=1234)


_FLAT_NAMES = ["a_ptr", "b_ptr", "c_ptr", "alpha", "numel", "BLOCK", "EVEN"]
_FLAT_SIGNATURE = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "alpha": "fp32", "numel": "i32",
                   "BLOCK": "constexpr", "EVEN": "constexpr"}


_MAP_META = {"swizzle": 3, "elem_size": 2, "elem_type": 6, "block_size": [64, 32], "fp4_padded": False}


def test_launch_codes_follow_the_binarys_parameters():
    def codes(binary, varying=4):
        return callpath.launch_codes(binary, _FLAT_NAMES, varying)

    # Constexprs are left out; each scratch area the compiler declares takes a null pointer.
    assert codes(_fake_binary(_FLAT_SIGNATURE)) == ("pppfipp", 0, (4, None, None), {})
    no_scratch = _fake_binary(_FLAT_SIGNATURE)
    del no_scratch.metadata.global_scratch_size, no_scratch.metadata.profile_scratch_size
    assert codes(no_scratch) == ("pppfi", 0, (4,), {})
    # A tensor descriptor the compiler lowered to a tensor map: the map, its shape, its strides.
    described = dict(_FLAT_SIGNATURE, b_ptr="tensordesc<fp16[64, 32]>")
    assert codes(_fake_binary(described, tensordesc_meta=[_MAP_META])) == ("pDiillpfipp", 0, (4, None, None),
                                                                            {1: _MAP_META})
    # Where it cannot launch, Triton's launch does: a descriptor not lowered to a map (no metadata
    # for it), one the signature fixes (past the varying arguments), an fp4 or im2col map.
    assert codes(_fake_binary(described)) is None
    assert codes(_fake_binary(described, tensordesc_meta=[_MAP_META]), varying=1) is None
    assert codes(_fake_binary(described, tensordesc_meta=[dict(_MAP_META, fp4_padded=True)])) is None
    assert codes(_fake_binary(described, tensordesc_meta=[dict(_MAP_META, is_im2col=True)])) is None
    assert codes(_fake_binary(_FLAT_SIGNATURE, tensordesc_meta=[_MAP_META])) is None  # metadata for no descriptor
    assert codes(_fake_binary(dict(_FLAT_SIGNATURE, alpha="fp16"))) is None  # a width it is not sure of
    assert codes(_fake_binary(dict(_FLAT_SIGNATURE, alpha="u1"))) == ("pppBipp", 0, (4, None, None), {})  # a bool: a byte
    assert codes(_fake_binary(_FLAT_SIGNATURE, global_scratch_size=256)) is None
    assert codes(_fake_binary(_FLAT_SIGNATURE, num_ctas=2)) is None
    assert codes(_fake_binary(_FLAT_SIGNATURE, launch_pdl=True)) is None
    # Leading varying arguments it does not take (None pointers) are skipped; others it cannot.
    assert codes(_fake_binary(dict(_FLAT_SIGNATURE, a_ptr="constexpr", b_ptr="constexpr"))) == ("pfipp", 2, (4, None, None), {})
    assert codes(_fake_binary(dict(_FLAT_SIGNATURE, alpha="constexpr"))) is None
    assert codes(_fake_binary(dict(_FLAT_SIGNATURE, numel="constexpr"))) == ("pppfpp", 0, (None, None), {})


def _quiet_call_path(monkeypatch, module):
    """The call path as on a GPU with no hook listening, on stream 77 of device 0."""
    monkeypatch.setattr(callpath, "_module", module)
    monkeypatch.setattr(callpath, "INTERPRET", False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    import triton

    monkeypatch.setattr(triton.runtime, "driver", SimpleNamespace(active=SimpleNamespace(get_current_stream=lambda d: 77)))
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(triton, "knobs", SimpleNamespace(runtime=QUIET), raising=False)


def test_call_path_learns_triton_launches_and_forgets_with_the_choice(module, monkeypatch):
    _quiet_call_path(monkeypatch, module)
    path = callpath.CallPath()
    a, c = torch.randn(6), torch.empty(6)
    binary = _fake_binary({"a_ptr": "*fp32", "c_ptr": "*fp32", "numel": "i32", "BLOCK": "constexpr"})
    launched = rt.launch.Launched(binary, ["a_ptr", "c_ptr", "numel", "BLOCK"], (0,), (a, c, 6), 2, 0)
    assert path.call(a) is None
    assert path.learn((a,), rt.launch.Launched(None, [], (1,), (a, c), 2, None), c) is False  # the interpreter's
    assert path.learn((a,), launched, c) is True
    assert path.call is path.table and path.table.explain(a) is not None
    path.forget()
    assert path.call(a) is None


def test_without_the_module_calls_stay_on_the_python_path_and_it_says_why_once(monkeypatch):
    monkeypatch.setattr(callpath, "INTERPRET", False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(callpath, "load", lambda wait=False: None)
    monkeypatch.setattr(callpath, "UNAVAILABLE", "the compiled call path is not available: no C++ compiler")
    monkeypatch.setattr(callpath, "_WARNED", False)
    path = callpath.CallPath()
    a, c = torch.randn(6), torch.empty(6)
    binary = _fake_binary({"a_ptr": "*fp32", "c_ptr": "*fp32"})
    launched = rt.launch.Launched(binary, ["a_ptr", "c_ptr"], (1,), (a, c), 2, 0)
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler; repeat calls take Triton's launch"):
        assert path.learn((a,), launched, c) is False
    assert path.learn((a,), launched, c) is False  # once
    assert path.call(a) is None


def test_the_module_is_loaded_in_a_thread_and_a_failure_is_remembered(monkeypatch):
    monkeypatch.delenv("TILEGEN_CALL_PATH", raising=False)
    for name, value in (("_module", None), ("_loader", None), ("UNAVAILABLE", None)):
        monkeypatch.setattr(callpath, name, value)
    monkeypatch.setattr(native, "load", lambda name: (_ for _ in ()).throw(native.BuildError("no C++ compiler")))
    assert callpath.load(wait=True) is None
    assert callpath.UNAVAILABLE == "the compiled call path is not available: no C++ compiler"
    assert callpath._loader[0].name == "tilegen-call-path"
    loader = callpath._loader
    assert callpath.load() is None and callpath._loader is loader  # not tried again


def test_turned_off_it_never_builds(monkeypatch):
    monkeypatch.setenv("TILEGEN_CALL_PATH", "0")
    for name, value in (("_module", None), ("_loader", None), ("UNAVAILABLE", None)):
        monkeypatch.setattr(callpath, name, value)
    assert callpath.load() is None and callpath.UNAVAILABLE == callpath.DISABLED and callpath._loader is None


# ---- the build mechanism -------------------------------------------------------------------

def test_cache_dir_honours_xdg_and_the_explicit_setting(monkeypatch, tmp_path):
    monkeypatch.delenv("TILEGEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert native.cache_dir() == str(tmp_path / "xdg" / "tilegen")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert native.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "tilegen")
    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(tmp_path / "mine"))
    assert native.cache_dir() == str(tmp_path / "mine")


def test_a_folder_others_can_write_to_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o1777)  # as /tmp is
    with pytest.raises(native.BuildError, match="can be written by other users; refusing to load code from it"):
        native.private_dir(str(shared))
    fresh = native.private_dir(str(tmp_path / "fresh"))
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700
    link = tmp_path / "link"
    link.symlink_to(fresh)
    with pytest.raises(native.BuildError, match="is not a folder"):
        native.private_dir(str(link))


def test_a_planted_truncated_or_foreign_file_is_rebuilt_not_loaded(built, monkeypatch):
    module, path, _ = built
    good = open(path, "rb").read()
    stamp = os.stat(path).st_mtime_ns
    assert native.build("callpath") == (path, "")  # found verified: not built again
    assert os.stat(path).st_mtime_ns == stamp
    compiles = []
    real = native.compile_command
    monkeypatch.setattr(native, "compile_command", lambda source, output: compiles.append(output) or real(source, output))
    for damage in (good[: len(good) // 2], b"garbage"):
        # Truncated, or replaced by something else (as a new file: this process has the
        # module mapped, and writing into that file would pull it from under it).
        with open(path + ".planted", "wb") as handle:
            handle.write(damage)
        os.replace(path + ".planted", path)
        native.build("callpath")
        assert open(path, "rb").read() == good
    os.chmod(path, 0o666)  # writable by others: not trusted
    native.build("callpath")
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o022 == 0
    assert len(compiles) == 3
    scratch = [name for name in os.listdir(os.path.dirname(path)) if name.startswith(".build-")]
    assert scratch == []  # each build's scratch folder is gone
    # A killed builder's scratch folder is cleared by the next build.
    left = os.path.join(os.path.dirname(path), f".build-{os.path.basename(path)}-killed")
    os.mkdir(left)
    os.unlink(path)
    native.build("callpath")
    assert not os.path.exists(left) and len(compiles) == 4


def test_a_lock_left_by_a_dead_builder_or_dated_in_the_future_does_not_hold_a_build(built, monkeypatch):
    # The lock is an flock, which dies with its holder: a leftover lock file, whatever its time,
    # holds nothing.
    _, path, _ = built
    lock = path + ".lock"
    with open(lock, "a"):
        pass
    os.utime(lock, (4102444800, 4102444800))  # 2100
    os.unlink(path)
    rebuilt, _ = native.build("callpath")
    assert rebuilt == path and os.path.exists(path)


def test_a_failed_build_says_why_and_leaves_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "compile_command", lambda source, output: [sys.executable, "-c",
                        "import sys; sys.stderr.write('x.cpp:1: error: no good'); sys.exit(1)"])
    with pytest.raises(native.BuildError, match="building callpath failed: x.cpp:1: error: no good"):
        native.build("callpath")
    left = sorted(os.listdir(tmp_path / "cache"))
    assert all(name.endswith(".lock") for name in left)
    monkeypatch.setenv("CXX", "")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(native.BuildError, match="no C\\+\\+ compiler"):
        native.compiler()
    # A compiler that cannot run (CXX naming no program): the same kind of error, which the
    # background builds catch (it escaped them as FileNotFoundError, a thread's traceback).
    monkeypatch.setattr(native, "compile_command", lambda source, output: [str(tmp_path / "no-such-c++"), source])
    with pytest.raises(native.BuildError, match=r"the C\+\+ compiler '.*no-such-c\+\+' cannot be run: No such file"):
        native.build("callpath")


# ---- on the GPU: every op's repeat calls ------------------------------------------------------

def _gpu_cases():
    """(op, input shapes, the wrapper's arguments from the inputs, its scalars, the oracle) for
    every op: elementwise ones flat and strided, matmul ones with and without masks, split-K
    (M = 16) and tensor-descriptor loads (4096^3's table entry in float16), which must stay right."""
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
        ("matmul", [(1024, 1024), (1024, 1024)], same, {}, lambda a, b: a @ b),
        ("matmul", [(4096, 4096), (4096, 4096)], same, {}, lambda a, b: a @ b),
        ("matmul_bias_gelu", [(100, 64), (64, 96), (96,)], same, {}, lambda a, b, bias: F.gelu(a @ b + bias)),
        ("matmul_residual_scaled", [(128, 256), (256, 128), (128, 128)], same, dict(alpha=0.5, beta=2.0),
         lambda x, w, r: 0.5 * (x @ w) + 2.0 * r),
        # Broadcast calls: the row is launched as a stride-0 view of the argument.
        ("scaled_silu_mul", [(130, 96), (96,)], same, dict(alpha=0.5), lambda a, b: 0.5 * F.silu(a) * b),
        ("bias_gelu", [(3, 130, 96), (96,)], same, {}, lambda x, bias: F.gelu(x + bias)),
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled call path launches on a GPU only")
@pytest.mark.parametrize("case", range(14))
def test_repeat_calls_are_served_compiled_and_stay_right(case):
    import generated as ops
    from tilegen import testing as s

    if callpath.load(wait=True) is None:
        pytest.skip(f"no compiled call path here: {callpath.UNAVAILABLE}")
    op, shapes, arguments, scalars, oracle = _gpu_cases()[case]
    table_of = lambda: rt.op_of(f"generated.{op}").call_path.table  # noqa: E731
    for dtype in (torch.float16, torch.float32 if op != "matmul_residual_scaled" else torch.bfloat16):
        args = arguments(*[s.random(shape, dtype, seed) for seed, shape in enumerate(shapes)])
        with rt.op_of(f"generated.{op}").configs.recording() as chosen:
            getattr(ops, op)(*args, **scalars)  # the Python path serves it, and the table learns it
        hits = table_of().hits if table_of() is not None else 0
        for seed in range(3):  # other tensors of the same signature, and fresh outputs
            args = arguments(*[s.random(shape, dtype, 10 * seed + i + 10) for i, shape in enumerate(shapes)])
            got = getattr(ops, op)(*args, **scalars)
            want = oracle(*[t.float() for t in args])
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                assert g.dtype == dtype and g.is_contiguous(), op
                torch.testing.assert_close(g.float(), w, atol=5e-2, rtol=2e-2, msg=op)
        served = table_of().hits - hits if table_of() is not None else 0
        assert served == 3, (op, shapes, dtype)  # tensor-descriptor launches too, their maps encoded per call
        if shapes[0] == (4096, 4096):  # the learned launch loads as the chosen config does (H200's table: descriptors)
            codes = callpath.load().describe(table_of().explain(*args)[1])[5]
            assert ("D" in codes) == bool(chosen[-1][1].get("TMA")), (codes, chosen[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the compiler dies with its builder on Linux")
def test_a_killed_builder_leaves_no_compiler_running(tmp_path):
    # A stand-in compiler that says who it is and then takes its time.
    fake = tmp_path / "slow-c++"
    pid_file = tmp_path / "compiler.pid"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    fake.chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    env = {**os.environ, "CXX": str(fake), "TILEGEN_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    builder = subprocess.Popen([sys.executable, "-c", "from tilegen.runtime import native; native.build('callpath')"],
                               env=env)
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        compiler_pid = int(pid_file.read_text())
        os.kill(compiler_pid, 0)  # the compiler is running
    finally:
        builder.kill()
        builder.wait()
    deadline = time.monotonic() + 10
    while _running(compiler_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _running(compiler_pid):
        os.kill(compiler_pid, signal.SIGKILL)
        raise AssertionError("the compiler outlived its killed builder")


def _running(pid):
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled call path launches on a GPU only")
@pytest.mark.parametrize("op", ["softmax", "layer_norm"])
def test_a_reductions_repeat_calls_are_served_compiled_and_stay_right(op):
    import torch.nn.functional as F

    import generated as ops
    from tilegen import testing as s

    if callpath.load(wait=True) is None:
        pytest.skip(f"no compiled call path here: {callpath.UNAVAILABLE}")
    table_of = lambda: rt.op_of(f"generated.{op}").call_path.table  # noqa: E731
    oracles = {"softmax": lambda x: torch.softmax(x, -1),
               "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)}
    for shape in [(3, 70, 1000), (8, 32768)]:  # several rows a program; one row a program, held whole
        def inputs(seed):
            x = s.random(shape, torch.float16, seed)
            extra = [s.random(shape[-1:], torch.float16, seed + i + 1) for i in range(2)] if op == "layer_norm" else []
            return [x, *extra]

        getattr(ops, op)(*inputs(0))  # the Python path serves it, and the table learns it
        hits = table_of().hits
        for seed in (10, 20):
            args = inputs(seed)
            got = getattr(ops, op)(*args)
            got = got[0] if isinstance(got, tuple) else got
            torch.testing.assert_close(got.float(), oracles[op](*[t.float() for t in args]), atol=2e-2, rtol=2e-2)
        assert table_of().hits - hits == 2, (op, shape)


def test_a_norms_backward_is_one_launch_served_compiled_the_same_every_run():
    import torch.nn.functional as F

    from generated import rms_norm
    from generated.rms_norm import _BACKWARD

    if callpath.load(wait=True) is None:
        pytest.skip(f"no compiled call path here: {callpath.UNAVAILABLE}")
    x = torch.randn(300, 1000, device="cuda", dtype=torch.float16, requires_grad=True)
    w = torch.randn(1000, device="cuda", dtype=torch.float16, requires_grad=True)
    seed = torch.randn(300, 1000, device="cuda", dtype=torch.float16)

    def step():
        y, _ = rms_norm(x, w, eps=1e-6)
        return torch.autograd.grad(y, (x, w), seed)

    first = step()  # the Python path serves the backward, and its call path learns it
    hits = _BACKWARD.call_path.table.hits
    again = [step() for _ in range(3)]
    assert _BACKWARD.call_path.table.hits - hits == 3
    # The weight's gradient is added up in program order by the last program: the same bits every run.
    assert all(torch.equal(g[1], first[1]) and torch.equal(g[0], first[0]) for g in again)
    x0, w0 = (t.detach().double().requires_grad_() for t in (x, w))
    want = torch.autograd.grad(F.rms_norm(x0, (1000,), w0, 1e-6), (x0, w0), seed.double())
    for g, e in zip(first, want):
        torch.testing.assert_close(g.double(), e, atol=5e-2, rtol=2e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled call path launches on a GPU only")
@pytest.mark.parametrize("store", [False, True], ids=["pointer_store", "descriptor_store"])
@pytest.mark.parametrize("op", ["bmm", "fp8_scaled_mm"])
def test_repeat_calls_through_3d_and_fp8_descriptors_are_served_and_stay_right(op, store):
    # A batch's [matrices, rows, cols] descriptors and fp8's K-major B: tensor maps of rank 3, and
    # of one-byte elements with a transposed box, encoded per call. With TMA_STORE the output
    # goes out through a descriptor too, described over a view of the call's output (3-D for
    # bmm): its map is encoded for each call's fresh output.
    module = _descriptor_module(op)
    # bmm's B column-major: its descriptor is of B's transpose (fp8's B is K-major anyway).
    make, oracle = _matmul_case(op, 256, 128, 192, batch=(3,) if op == "bmm" else (), b_column_major=True)
    config = dict(BM=128, BN=64, BK=64, SPLIT_K=1, num_warps=4, num_stages=3, TMA=1, **({"TMA_STORE": 1} if store else {}))
    plan = _served_again_and_right(module, op, config, make, oracle)
    codes = callpath.load().describe(plan)[5]
    assert codes.count("D") == (3 if store else 2), codes  # both operands' maps, and the output's


def _descriptor_module(op):
    """The generated module of `op`, where the compiled call path and tensor descriptors are (else the test skips)."""
    import importlib

    if callpath.load(wait=True) is None:
        pytest.skip(f"no compiled call path here: {callpath.UNAVAILABLE}")
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("tensor descriptors need compute capability 9")
    return importlib.import_module(f"generated.{op}")


def _matmul_case(op, m, k, n, batch=(), b_column_major=False):
    """(make, oracle): fresh inputs of an [m, k] @ [k, n] call of `op` (matmul-like in float16,
    `batch` leading; fp8_scaled_mm with K-major B and row-wise scales), and its float32 oracle."""
    g = torch.Generator(device="cuda").manual_seed(0)
    if op == "fp8_scaled_mm":
        # Operands scaled by k**-0.25 keep the outputs near 1 whatever k is, so that the specs' fast
        # accumulation (Hopper's reduced-precision sum over the whole K loop) fits one tolerance.
        def make():
            a = (torch.randn(m, k, device="cuda", generator=g) * k**-0.25).to(torch.float8_e4m3fn)
            b = (torch.randn(n, k, device="cuda", generator=g) * k**-0.25).to(torch.float8_e4m3fn).t()
            return a, b, torch.rand(m, device="cuda", generator=g) + 0.5, torch.rand(n, device="cuda", generator=g) + 0.5
        return make, lambda a, b, row, col: ((a.float() @ b.float()) * row[:, None] * col).to(torch.bfloat16)

    def make():
        a = torch.randn(*batch, m, k, device="cuda", generator=g, dtype=torch.float16)
        if b_column_major:
            return a, torch.randn(*batch, n, k, device="cuda", generator=g, dtype=torch.float16).transpose(-2, -1)
        return a, torch.randn(*batch, k, n, device="cuda", generator=g, dtype=torch.float16)
    return make, lambda a, b: (a.float() @ b.float()).to(a.dtype)


def _served_again_and_right(module, op, config, make, oracle, label=""):
    """Under `config`: a first call the Python path serves and the call path learns, then three
    calls with fresh inputs, each served by the call path and right. (The plan the last call launched,
    explained while `config` is forced: leaving it forgets what the table learned under it.)"""
    with module._OP.configs.forcing(config):
        getattr(module, op)(*make())
        table = module._OP.call_path.table
        hits = table.hits
        for _ in range(3):
            args = make()
            torch.testing.assert_close(getattr(module, op)(*args).float(), oracle(*args).float(), atol=5e-2, rtol=2e-2,
                                       msg=lambda m: f"{label}: {m}")
        assert table.hits - hits == 3, (label, config)
        return table.explain(*args)[1]


# Keys whose candidates, explored as tuning explores them, hold every launch style: many tiles
# (persistent and flattened variants), few tiles over a long K (split-K).
_STYLE_KEYS = {"matmul": [(4096, 4096, 1024), (256, 192, 4096)], "bmm": [(2048, 2048, 1024, 8), (256, 192, 4096, 2)],
               "fp8_scaled_mm": [(4096, 4096, 1024), (256, 192, 4096)]}


def launch_styles(space, facts, keys, itemsize):
    """One config of each launch style `space` offers tuning at `keys` (its smallest tile): the
    style is which of the on/off fields it sets, and whether it splits K."""
    from tilegen.schema import FLAG_FIELDS

    styles = {}
    for key in keys:
        for config in space.candidates(facts, (*key, itemsize), explore=True):
            style = tuple(f for f in FLAG_FIELDS if config.get(f)) + (("SPLIT_K",) if config.get("SPLIT_K", 1) > 1 else ())
            size = (config["BM"] * config["BN"] * config["BK"], config["num_stages"], config["num_warps"])
            if style not in styles or size < styles[style][0]:
                styles[style] = (size, config)
    return {style: config for style, (_, config) in styles.items()}


@pytest.mark.parametrize("op", sorted(_STYLE_KEYS))
def test_the_launch_styles_cover_what_tuning_may_choose(op):
    import importlib

    space = importlib.import_module(f"generated.{op}")._OP.configs.space
    itemsize = 1 if op.startswith("fp8") else 2
    styles = launch_styles(space, (132, 232448), _STYLE_KEYS[op], itemsize)
    assert {(), ("TMA",), ("TMA", "TMA_STORE"), ("SPLIT_K",), ("PERSISTENT", "FLATTEN"),
            ("TMA", "PERSISTENT", "FLATTEN", "TMA_STORE")} <= set(styles), sorted(styles)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled call path launches on a GPU only")
@pytest.mark.parametrize("op", sorted(_STYLE_KEYS))
def test_every_launch_style_tuning_may_choose_is_served_compiled_and_stays_right(op):
    # A launch the compiled call path cannot learn falls back to the Python path without a word:
    # hundreds of microseconds a call, which tuning then counts against the config (descriptor
    # stores of a batched output, described over a view of it, did until the call path knew
    # such views). Every style tuning may choose: its repeat calls served, and right.
    module = _descriptor_module(op)
    make, oracle = _matmul_case(op, 256, 1024, 192, batch=(3,) if op == "bmm" else ())
    facts = rt.device_facts(torch.device("cuda"))
    itemsize = 1 if op.startswith("fp8") else 2
    for style, config in launch_styles(module._OP.configs.space, facts, _STYLE_KEYS[op], itemsize).items():
        _served_again_and_right(module, op, config, make, oracle, label=" ".join(style) or "pointers")


# Calls that record autograd, served where the table has the op's node to attach (autograd_node.cpp,
# the default): tried on the CPU through explain and a plan of no programs.
@pytest.fixture(scope="module")
def node_module(built):
    return native.load("autograd_node")


def _scale_formula(node_module, seen):
    """A Formula of c = a * s (s a scalar) whose backward records what it was given."""
    def gradients(saved, grads, needed, scalars):
        seen.append((len(saved), needed, scalars))
        return (grads[0] * scalars[0] if needed[0] else None,)
    return node_module.Formula("scale", gradients, 1, (), (), 1, (-2,))


def test_a_call_that_records_autograd_is_served_with_the_node_attached(module, node_module):
    from torch._dynamo import compiled_autograd

    table = table_with(module)
    a, c = torch.randn(4, 5), torch.empty(4, 5)
    assert table.learn((a, 3.0), (a, c, 3.0), empty_plan(module, "ppf", 3), 0, c, 77) is True
    x = torch.randn(4, 5, requires_grad=True)
    assert table.explain(x, 3.0) is None  # no formula: autograd's calls stay with the Python path
    seen = []
    table.formula = _scale_formula(node_module, seen)
    got, filled = table.explain(x, 3.0)
    assert filled_values(module, filled)[0] == x.data_ptr()  # launched on the tensor's own data
    assert got.requires_grad and got.grad_fn.name() == "scaleBackward"
    (gx,) = torch.autograd.grad(got, x, torch.ones(4, 5))
    torch.testing.assert_close(gx, torch.full((4, 5), 3.0))
    assert seen == [(0, (True,), (3.0,))]
    with torch.no_grad():  # records nothing: served as any call, no node
        assert table.explain(x, 3.0)[0].grad_fn is None
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        assert table.explain(x, 3.0) is None  # the Python path's Function honours the hooks
    with unittest.mock.patch.object(compiled_autograd, "compiled_autograd_enabled", True):
        assert table.explain(x, 3.0) is None  # compiled autograd traces the Function's backward
    table.formula = None
    assert table.explain(x, 3.0) is None


def test_a_dual_tensor_is_not_served(module):
    # Forward-mode AD's tangent would be dropped by a served launch: the Python path refuses it.
    import torch.autograd.forward_ad as fwAD

    table = table_with(module)
    a, c = torch.randn(5), torch.empty(5)
    assert table.learn((a, 3.0), (a, c, 3.0), empty_plan(module, "ppf", 3), 0, c, 77) is True
    with fwAD.dual_level():
        assert table.explain(fwAD.make_dual(torch.randn(5), torch.ones(5)), 3.0) is None
        assert table.explain(torch.randn(5), 3.0) is not None


def test_calls_under_torch_func_transforms_are_not_served_with_a_node(module, node_module):
    table = table_with(module)
    a, c = torch.randn(5), torch.empty(5)
    assert table.learn((a, 3.0), (a, c, 3.0), empty_plan(module, "ppf", 3), 0, c, 77) is True
    table.formula = _scale_formula(node_module, [])
    served = []

    def f(x):
        served.append(table.explain(x, 3.0))
        return (x * 3.0).sum()
    torch.func.grad(f)(torch.randn(5))
    assert served == [None]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled call path launches on a GPU only")
@pytest.mark.parametrize("op", ["add", "rms_norm", "softmax", "matmul_relu", "matmul_bias_gelu"])
def test_repeat_training_calls_are_served_with_the_node_and_their_gradients_stay_right(op, monkeypatch):
    # A call whose inputs require grad is served by the table (the forward's launch) and the
    # node attached there; its backward runs the derived backward op, whose own repeat calls the
    # call path serves. Gradients as through torch.autograd.Function. matmul_bias_gelu's training
    # calls take its training variant (the accumulator kept too): their call path of their own.
    import importlib

    if callpath.load(wait=True) is None:
        pytest.skip(f"no compiled call path here: {callpath.UNAVAILABLE}")
    monkeypatch.setenv("TILEGEN_AUTOGRAD_NODE", "1")
    from tilegen.runtime import autograd
    if autograd.native_module(wait=True) is None:  # (a table takes the node once it is loaded)
        pytest.skip("the autograd node cannot be built here")
    module = importlib.import_module(f"generated.{op}")
    fn = getattr(module, op)
    shapes = {"add": [(64, 256), (256,)], "rms_norm": [(64, 256), (256,)], "softmax": [(64, 256)],
              "matmul_relu": [(64, 128), (128, 96)], "matmul_bias_gelu": [(64, 128), (128, 96), (96,)]}[op]
    g = torch.Generator(device="cuda").manual_seed(0)

    def leaves():
        return [torch.randn(*s, device="cuda", generator=g).requires_grad_() for s in shapes]

    def first(outputs):
        return outputs[0] if isinstance(outputs, tuple) else outputs

    first(fn(*leaves())).sum().backward()  # learned (from the forward it runs on detached tensors)
    path = module._OP.training_path if op == "matmul_bias_gelu" else module._OP.call_path
    table = path.table
    assert table.formula is not None and table.formula is path.formula.node_formula()
    for _ in range(3):
        inputs = leaves()
        hits = table.hits
        y = first(fn(*inputs))
        assert table.hits == hits + 1 and y.grad_fn.name() in (f"{op}Backward", f"{op}_trainingBackward")
        seed = torch.randn(y.shape, device="cuda", generator=g)
        got = torch.autograd.grad(y, inputs, seed)
        # Through torch.autograd.Function: the node neither asked for nor in the table.
        again = [t.detach().clone().requires_grad_() for t in inputs]
        monkeypatch.setenv("TILEGEN_AUTOGRAD_NODE", "0")
        table.formula, kept = None, table.formula
        y = first(fn(*again))
        assert "_EagerAutograd" in type(y.grad_fn).__name__
        want = torch.autograd.grad(y, again, seed)
        table.formula = kept
        monkeypatch.setenv("TILEGEN_AUTOGRAD_NODE", "1")
        for x, w in zip(got, want):
            torch.testing.assert_close(x, w, rtol=1e-5, atol=1e-5)

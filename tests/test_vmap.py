"""torch.vmap of generated ops (tilegen.runtime.batching), against the op called on each sample in
turn (vmap with torch.func's other transforms: test_func.py)."""

import pytest
import torch

import tilegen.runtime as rt
from tilegen.runtime import batching

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def randn(*shape, requires_grad=False):
    return torch.randn(*shape, device=DEVICE, requires_grad=requires_grad)


def each_sample(fn, args, dims):
    """What vmap means: `fn` on each sample, the results stacked along a new first axis."""
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    results = [fn(*(a if d is None else a.select(d, i) for a, d in zip(args, dims))) for i in range(size)]
    if isinstance(results[0], torch.Tensor):
        return torch.stack(results)
    return tuple(torch.stack(parts) for parts in zip(*results))


@pytest.fixture
def paths(monkeypatch):
    """Which of the rule's two ways served each call: 'once' (the whole batch) or 'each' sample."""
    taken = []
    at_once, per_sample = batching._at_once, batching._per_sample
    monkeypatch.setattr(batching, "_at_once", lambda *a: taken.append("once") or at_once(*a))
    monkeypatch.setattr(batching, "_per_sample", lambda *a: taken.append("each") or per_sample(*a))
    return taken


CASES = {
    # name: (op, shapes, in_dims, the rule's path): inputs that take leading axes (an elementwise
    # op's broadcasting ones, a reduction's rows, a batched matmul's operands) are batched in one
    # call, the batch axis lined up first (another rank, a 0-d sample, a batch axis not first); a
    # batched input of a fixed rank (a bias or weight [N], a 2-D matmul's operand) runs a sample
    # at a time.
    "add, both batched": ("add", [(3, 5, 7), (3, 5, 7)], (0, 0), "once"),
    "add, one shared": ("add", [(3, 5, 7), (5, 7)], (0, None), "once"),
    "add, batch axis last": ("add", [(5, 7, 3), (5, 7)], (2, None), "once"),
    "add, samples of two ranks": ("add", [(3, 7), (5, 7)], (0, None), "once"),
    "add, 0-d samples": ("add", [(3,), (5, 7)], (0, None), "once"),
    "bias_gelu, bias shared": ("bias_gelu", [(3, 5, 7), (7,)], (0, None), "once"),
    "bias_gelu, bias batched": ("bias_gelu", [(3, 5, 7), (3, 7)], (0, 0), "each"),
    "softmax": ("softmax", [(3, 5, 7)], (0,), "once"),
    "layer_norm": ("layer_norm", [(3, 5, 7), (7,), (7,)], (0, None, None), "once"),
    "layer_norm, weight batched": ("layer_norm", [(3, 5, 7), (3, 7), (7,)], (0, 0, None), "each"),
    "add_rms_norm, residual shared": ("add_rms_norm", [(3, 5, 7), (5, 7), (7,)], (0, None, None), "once"),
    "matmul_relu": ("matmul_relu", [(3, 16, 8), (8, 16)], (0, None), "each"),
    "bmm, b shared": ("bmm", [(3, 2, 16, 8), (8, 16)], (0, None), "once"),
    "bmm, a of one matrix": ("bmm", [(3, 16, 8), (2, 8, 16)], (0, None), "once"),
    "bmm, a shared": ("bmm", [(2, 16, 8), (8, 16, 3)], (None, 2), "once"),
    "bmm_bias_silu, bias batched": ("bmm_bias_silu", [(3, 16, 8), (8, 16), (3, 16)], (0, None, 0), "each"),
}


@pytest.mark.parametrize("case", CASES)
def test_vmap_matches_the_op_on_each_sample(case, paths):
    import generated

    name, shapes, dims, path = CASES[case]
    fn = getattr(generated, name)
    args = [randn(*shape) for shape in shapes]
    got = torch.func.vmap(fn, in_dims=dims)(*args)
    assert paths == [path]
    torch.testing.assert_close(got, each_sample(fn, args, dims))


def test_vmap_serves_the_registered_op_and_nested_vmaps(paths):
    import generated

    a, b = randn(2, 3, 4), randn(2, 3, 4)
    torch.testing.assert_close(torch.func.vmap(torch.func.vmap(generated.add))(a, b), a + b)
    assert paths == ["once", "once"]  # (each level's rule, the inner one's call batched by the outer)
    x, y = randn(3, 5), randn(5)
    torch.testing.assert_close(torch.func.vmap(torch.ops.generated.add, in_dims=(0, None))(x, y), x + y)
    scaled = torch.func.vmap(lambda a, b: generated.scaled_silu_mul(a, b, alpha=0.5), in_dims=(1, 0))
    torch.testing.assert_close(scaled(x.T, x), 0.5 * torch.nn.functional.silu(x) * x)


@pytest.mark.parametrize("name, shapes", [("add", [(3, 5, 7), (5, 7)]), ("softmax", [(3, 5, 7)]),
                                          ("matmul_relu", [(3, 16, 8), (8, 16)])])
def test_autograd_outside_vmap_records_the_op_on_the_plain_tensors(name, shapes):
    # The rule calls the registered op on plain tensors, which records its autograd formula there.
    import generated

    fn = getattr(generated, name)
    args = [randn(*shape, requires_grad=True) for shape in shapes]
    dims = (0,) + (None,) * (len(args) - 1)
    got = torch.func.vmap(fn, in_dims=dims)(*args)
    want = each_sample(fn, args, dims)
    seed = torch.randn_like(want)
    for g, w in zip(torch.autograd.grad(got, args, seed), torch.autograd.grad(want, args, seed)):
        torch.testing.assert_close(g, w)


def test_an_empty_batch_gives_empty_results_of_a_samples_shapes():
    # In one call the kernels see empty tensors; a sample at a time there is no sample to run, so
    # the shapes come from the op on fake tensors.
    import generated

    assert torch.func.vmap(generated.add)(randn(0, 4), randn(0, 4)).shape == (0, 4)
    assert torch.func.vmap(generated.softmax)(randn(0, 4, 5)).shape == (0, 4, 5)
    product = torch.func.vmap(generated.matmul_relu, in_dims=(None, 2))(randn(16, 8), randn(8, 16, 0))
    assert product.shape == (0, 16, 16) and product.dtype == torch.float32 and product.device.type == DEVICE
    normed = torch.func.vmap(generated.layer_norm, in_dims=(0, 0, None))(randn(0, 4, 8), randn(0, 8), randn(8))
    assert [t.shape for t in normed] == [(0, 4, 8), (0, 4), (0, 4)]


def test_out_is_refused_under_vmap():
    import generated

    with pytest.raises(TypeError, match=r"^add: out= under torch.vmap, which the op cannot write through"):
        torch.func.vmap(lambda a: generated.add(a, a, out=torch.empty(7, device=DEVICE)))(randn(3, 7))


def test_a_scalar_under_vmap_is_checked_as_in_an_eager_call():
    # A batched tensor given for a scalar would fail in PyTorch's dispatcher naming no argument;
    # an unbatched 0-d one would be read as a number, where an eager call refuses it.
    import generated

    a, b = randn(3, 8), randn(3, 8)
    scalar_given = r"^scaled_silu_mul: argument 'alpha' must be a Python float, got Tensor \(a scalar is one value"
    with pytest.raises(TypeError, match=scalar_given):
        torch.func.vmap(lambda a, b, s: generated.scaled_silu_mul(a, b, alpha=s))(a, b, randn(3))
    with pytest.raises(TypeError, match=scalar_given):
        torch.func.vmap(lambda a, b: generated.scaled_silu_mul(a, b, alpha=torch.tensor(2.0)))(a, b)
    with pytest.raises(TypeError, match=r"^rms_norm: argument 'eps' must be a Python float, got str$"):
        torch.func.vmap(lambda x, w: generated.rms_norm(x, w, eps="1e-6"))(randn(3, 4, 8), randn(3, 8))
    got = torch.func.vmap(lambda a, b: generated.scaled_silu_mul(a, b, alpha=2))(a, b)  # an int is a float's
    torch.testing.assert_close(got, generated.scaled_silu_mul(a, b, alpha=2.0))


def test_the_rule_lines_the_batch_axis_up_before_the_samples_axes():
    # One call with a batched input whose samples are of a lower rank than another input's: the
    # batch axis goes first and 1-sized axes after it, so broadcasting pairs sample axes alike.
    rule = batching.vmap_rule(torch.add, 2, batchable=(True, True), own_axes=(0, 0))

    class Info:
        batch_size = 3

    a, b = torch.randn(7, 3), torch.randn(5, 7)
    result, dims = rule(Info, (1, None), a, b)
    assert dims == 0
    torch.testing.assert_close(result, torch.stack([a[:, i] + b for i in range(3)]))
    result, dims = batching.vmap_rule(torch.add, 2)(Info, (1, None), a, b)
    torch.testing.assert_close(result, torch.stack([a[:, i] + b for i in range(3)]))
    assert rt.vmapped("add", None, [], a=a, b=b) is False  # no transform: the op's own path


def test_the_rule_lines_up_the_axes_before_each_inputs_own():
    # A reduction's row [..., N] beside its per-row input [...]: the per-row input's axes line up
    # with the row's before N (its own axis), not from the right.
    def scaled_rows(x, t):
        return x / t[..., None]

    rule = batching.vmap_rule(scaled_rows, 2, batchable=(True, True), own_axes=(1, 0))

    class Info:
        batch_size = 3

    x, t = torch.randn(3, 5, 7), torch.rand(5, 3) + 1  # t batched along its axis 1
    for args, dims in (((x, t), (0, 1)), ((x[0], t), (None, 1)), ((x, t[:, 0]), (0, None))):
        result, out_dims = rule(Info, dims, *args)
        assert out_dims == 0
        torch.testing.assert_close(result, each_sample(scaled_rows, args, dims))
    x2 = torch.randn(3, 7)  # a row of another rank than t's samples: its batch axis padded
    result, _ = rule(Info, (0, None), x2, t[:, 0])
    torch.testing.assert_close(result, each_sample(scaled_rows, (x2, t[:, 0]), (0, None)))


def test_a_reduction_over_another_axis_counts_its_dim_in_each_sample():
    import generated

    x = randn(3, 4, 6, 5)
    torch.testing.assert_close(torch.func.vmap(lambda a: generated.softmax(a, dim=1))(x), torch.softmax(x, dim=2))
    got = torch.func.vmap(lambda a: generated.softmax(a, dim=0), in_dims=1)(x)
    torch.testing.assert_close(got, torch.softmax(x, dim=0).movedim(1, 0))

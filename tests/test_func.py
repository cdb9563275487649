"""torch.func's reverse-mode transforms of generated ops (grad, vjp, jacrev, and vmap over or under
them: per-sample gradients), against the same transforms of PyTorch's own math; and the transforms
refused with one error naming the op and the argument (forward mode, functionalize).

Under them an op runs as a torch.autograd.Function with its own setup_context and vmap rule
(tilegen.runtime.autograd): the forward's kernels on the tensors functorch unwraps, the backward in
PyTorch's ops (the derived math a second derivative runs)."""

import pytest
import torch
import torch.nn.functional as F

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def randn(*shape):
    return torch.randn(*shape, device=DEVICE)


def close(got, want):
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-4)


def cases():
    """(name, the op, PyTorch's math of it, its inputs): an elementwise op with a scalar and a
    broadcast input, a reduction with a weight of a fixed rank, a matmul with an epilogue and a
    batched one (2-D operands: vmap runs a sample at a time; batched ones: the batch at once)."""
    import generated

    return [
        ("scaled_silu_mul", lambda a, b: generated.scaled_silu_mul(a, b, alpha=0.5),
         lambda a, b: 0.5 * F.silu(a) * b, (randn(3, 6), randn(6))),
        ("rms_norm", lambda x, w: generated.rms_norm(x, w, eps=1e-5)[0],
         lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps=1e-5), (randn(3, 8), randn(8))),
        ("softmax", generated.softmax, lambda x: torch.softmax(x, -1), (randn(3, 8),)),
        ("matmul_relu", generated.matmul_relu, lambda a, b: torch.relu(a @ b), (randn(5, 6), randn(6, 7))),
        ("bmm", generated.bmm, torch.matmul, (randn(2, 5, 6), randn(2, 6, 7))),
    ]


CASES = ["scaled_silu_mul", "rms_norm", "softmax", "matmul_relu", "bmm"]


def case(name):
    return next(c[1:] for c in cases() if c[0] == name)


def weighted(fn):
    """A scalar loss of fn's result that weighs each element differently (a sum alone would give
    softmax's inputs no gradient)."""
    def loss(*args):
        y = fn(*args)
        return (y * torch.linspace(-1, 2, y.numel(), device=y.device).reshape(y.shape)).sum()
    return loss


@pytest.mark.parametrize("name", CASES)
def test_grad_and_vjp_match_pytorchs(name):
    op, math, args = case(name)
    argnums = tuple(range(len(args)))
    for got, want in zip(torch.func.grad(weighted(op), argnums=argnums)(*args),
                         torch.func.grad(weighted(math), argnums=argnums)(*args)):
        close(got, want)
    out, vjp = torch.func.vjp(op, *args)
    close(out, math(*args))
    seed = torch.randn_like(out)
    for got, want in zip(vjp(seed), torch.func.vjp(math, *args)[1](seed)):
        close(got, want)


@pytest.mark.parametrize("name", CASES)
def test_jacrev_and_jacrev_of_jacrev_match_pytorchs(name):
    op, math, args = case(name)
    close(torch.func.jacrev(op)(*args), torch.func.jacrev(math)(*args))
    first, rest = args[0], args[1:]  # (a Hessian through the first input)
    close(torch.func.jacrev(torch.func.jacrev(weighted(lambda a: op(a, *rest))))(first),
          torch.func.jacrev(torch.func.jacrev(weighted(lambda a: math(a, *rest))))(first))


@pytest.mark.parametrize("name", CASES)
def test_per_sample_gradients_vmap_over_grad(name):
    # vmap(grad(f)): the op's forward under the vmap level runs its batching rule (the batch at
    # once, or a sample at a time) on the plain tensors; its backward under vmap.
    op, math, args = case(name)
    batched = tuple(torch.stack([a, 2 * a, -a]) for a in args)
    argnums = tuple(range(len(args)))
    for got, want in zip(torch.func.vmap(torch.func.grad(weighted(op), argnums=argnums))(*batched),
                         torch.func.vmap(torch.func.grad(weighted(math), argnums=argnums))(*batched)):
        close(got, want)
    # One input batched, the others shared (in_dims None), as per-sample gradients of a model are.
    dims = (0,) + (None,) * (len(args) - 1)
    for got, want in zip(torch.func.vmap(torch.func.grad(weighted(op), argnums=argnums), in_dims=dims)(batched[0], *args[1:]),
                         torch.func.vmap(torch.func.grad(weighted(math), argnums=argnums), in_dims=dims)(batched[0], *args[1:])):
        close(got, want)


@pytest.mark.parametrize("name", CASES)
def test_grad_over_vmap_and_grad_of_grad_match_pytorchs(name):
    op, math, args = case(name)
    batched = tuple(torch.stack([a, -2 * a]) for a in args)
    close(torch.func.grad(weighted(torch.func.vmap(op)))(*batched),
          torch.func.grad(weighted(torch.func.vmap(math)))(*batched))

    def inner(fn):
        return lambda a: torch.func.grad(weighted(fn))(a, *args[1:]).square().sum()
    close(torch.func.grad(inner(op))(args[0]), torch.func.grad(inner(math))(args[0]))


def test_the_forward_runs_the_kernels_and_the_backward_pytorchs_ops(monkeypatch):
    # Under grad the op's forward is its own launch (not PyTorch's math), its backward the derived
    # math in PyTorch's ops (the backward kernel cannot read the transform's tensors).
    import generated
    from tilegen.runtime import autograd

    forwards, backwards = [], []
    implementation = autograd.implementation_of

    def counted(op):
        run = implementation(op)
        (backwards if "backward" in op.__name__ else forwards).append(op.__name__)
        return run
    monkeypatch.setattr(autograd, "implementation_of", counted)
    x, w = randn(3, 8), randn(8)
    torch.func.grad(weighted(lambda x, w: generated.rms_norm(x, w)[0]), argnums=(0, 1))(x, w)
    assert forwards and all("rms_norm" in name for name in forwards), forwards
    assert backwards == []


TRANSFORMED = r"^{op}: argument '{arg}' is transformed by torch.func's {transform}, which tilegen's ops do not support"


def test_forward_mode_and_functionalize_are_refused_naming_the_op_and_argument():
    import generated

    x, y = randn(3, 5), randn(5)
    forward = TRANSFORMED.format(op="add", arg="a", transform=r"jvp \(or jacfwd, hessian\)")
    for transform in (lambda: torch.func.jvp(lambda a: generated.add(a, y), (y,), (y,)),
                      lambda: torch.func.jacfwd(lambda a: generated.add(a, y))(y),
                      lambda: torch.func.hessian(lambda a: generated.add(a, y).square().sum())(y),
                      lambda: torch.func.vmap(lambda a: torch.func.jvp(lambda t: generated.add(t, t), (a,), (a,)))(x)):
        with pytest.raises(TypeError, match=forward):
            transform()
    with pytest.raises(TypeError, match=TRANSFORMED.format(op="softmax", arg="x", transform="functionalize")):
        torch.func.functionalize(generated.softmax)(x)


def test_out_under_grad_is_refused_as_with_autograd():
    import generated

    y = randn(5)
    with pytest.raises(RuntimeError, match=r"^add: out= does not support automatic differentiation"):
        torch.func.grad(lambda a: generated.add(a, y, out=torch.empty_like(y)).sum())(y)

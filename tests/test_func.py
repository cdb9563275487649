"""torch.func's transforms of generated ops (grad, vjp, jacrev, jvp, jacfwd, hessian, and vmap over
or under them: per-sample gradients), against the same transforms of PyTorch's own math; and
functionalize, refused with one error naming the op and the argument.

Under them an op runs as a torch.autograd.Function with its own setup_context, vmap rule and jvp
(tilegen.runtime.autograd): the forward's kernels on the tensors functorch unwraps, the backward in
PyTorch's ops (the derived math a second derivative runs), the tangents its transpose."""

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
    # Counted where an implementation runs, not where it is looked up: on a GPU the call path's
    # first table of the op looks its backward op up, to build the autograd node it would attach.
    import functools

    import generated
    from tilegen.runtime import autograd, transforms

    forwards, backwards = [], []
    implementation = autograd.implementation_of

    def counted(op):
        run = implementation(op)

        @functools.wraps(run)
        def counting(*args):
            (backwards if "backward" in op.__name__ else forwards).append(op.__name__)
            return run(*args)
        return counting
    for module in (autograd, transforms):
        monkeypatch.setattr(module, "implementation_of", counted)
    x, w = randn(3, 8), randn(8)
    torch.func.grad(weighted(lambda x, w: generated.rms_norm(x, w)[0]), argnums=(0, 1))(x, w)
    assert forwards and all("rms_norm" in name for name in forwards), forwards
    assert backwards == []


@pytest.mark.parametrize("name", CASES)
def test_jvp_jacfwd_and_hessian_match_pytorchs(name):
    # Forward mode: the tangents transpose the derived backward's math (a vjp of it, at zero
    # gradients), under vmap too (jacfwd), and over reverse mode (hessian: jacfwd of jacrev).
    op, math, args = case(name)
    tangents = tuple(torch.randn_like(a) for a in args)
    got, got_tangent = torch.func.jvp(op, args, tangents)
    want, want_tangent = torch.func.jvp(math, args, tangents)
    close(got, want)
    close(got_tangent, want_tangent)
    argnums = tuple(range(len(args)))
    for got, want in zip(torch.func.jacfwd(op, argnums=argnums)(*args), torch.func.jacfwd(math, argnums=argnums)(*args)):
        close(got, want)
    close(torch.func.hessian(weighted(lambda a: op(a, *args[1:])))(args[0]),
          torch.func.hessian(weighted(lambda a: math(a, *args[1:])))(args[0]))


def test_every_output_gets_its_tangent():
    # rms_norm's rstd too: d rstd = -rstd^3 * mean(x * dx).
    import generated

    x, w, dx, dw = randn(3, 8), randn(8), randn(3, 8), randn(8)
    (y, rstd), (dy, drstd) = torch.func.jvp(lambda x, w: generated.rms_norm(x, w, eps=1e-5), (x, w), (dx, dw))
    want_rstd = torch.rsqrt(x.square().mean(-1) + 1e-5)
    close(rstd, want_rstd)
    close(drstd, -want_rstd ** 3 * (x * dx).mean(-1))
    close(dy, torch.func.jvp(lambda x, w: F.rms_norm(x, (8,), w, eps=1e-5), (x, w), (dx, dw))[1])


def test_functionalize_and_linearize_are_refused_naming_the_op():
    import generated

    with pytest.raises(TypeError, match=r"^softmax: argument 'x' is transformed by torch.func's functionalize, which "
                                        r"tilegen's ops do not support"):
        torch.func.functionalize(generated.softmax)(randn(3, 5))
    # linearize traces the function: the trace reaches the registered op inside its dual level.
    with pytest.raises(TypeError, match=r"^torch.ops.generated.softmax: called inside a forward-mode AD level .* "
                                        r"as torch.func.linearize traces it: use torch.func.jvp\)$"):
        torch.func.linearize(generated.softmax, randn(3, 5))


def test_out_under_grad_or_forward_mode_is_refused_as_with_autograd():
    import torch.autograd.forward_ad as fwAD

    import generated

    y = randn(5)
    refused = r"^add: out= does not support automatic differentiation, but argument 'a' "
    with pytest.raises(RuntimeError, match=refused + "requires grad"):
        torch.func.grad(lambda a: generated.add(a, y, out=torch.empty_like(y)).sum())(y)
    with pytest.raises(RuntimeError, match=refused + "is differentiated"):
        torch.func.jvp(lambda a: generated.add(a, y, out=torch.empty_like(y)), (y,), (y,))
    with fwAD.dual_level(), pytest.raises(RuntimeError, match=refused + "is differentiated"):
        generated.add(fwAD.make_dual(y, y), y, out=torch.empty_like(y))


def test_an_op_with_no_backward_refuses_every_differentiation_by_name():
    # An fp8 matmul has no derivative: grad, jvp and dual tensors each get its one error, at the
    # call, rather than a result with no gradient or tangent (vmap alone is served).
    import torch.autograd.forward_ad as fwAD

    import generated

    a = randn(16, 32).to(torch.float8_e4m3fn)
    b = randn(32, 16).to(torch.float8_e4m3fn).t().contiguous().t()
    scale = torch.ones((), device=DEVICE)

    def product(scale):
        return generated.fp8_scaled_mm(a, b, scale, scale)
    message = (r"^fp8_scaled_mm: argument 'a_scale' (requires grad|is differentiated \(torch.func's grad, vjp, jvp or "
               r"their kin, or a forward-mode dual tensor\)), but an fp8 matmul has no backward")
    with pytest.raises(RuntimeError, match=message):
        torch.func.grad(lambda s: product(s).float().sum())(scale)
    with pytest.raises(RuntimeError, match=message):
        torch.func.jvp(product, (scale,), (scale,))
    with fwAD.dual_level(), pytest.raises(RuntimeError, match=message):
        product(fwAD.make_dual(scale, scale))


def test_under_torch_compile_the_transforms_run_the_ops_function_and_vmap_alone_traces():
    # A registered op traced under grad gets no gradient (PyTorch runs no custom op's formula
    # there) and under jvp no tangent (zeros, silently): such calls run eagerly, as the Function
    # that gives both; vmap alone traces the registered op whole (fullgraph).
    import generated
    from tilegen.testing.pytorch_op import COMPILE_BACKEND

    torch._dynamo.reset()
    x = randn(3, 4, 8)

    def softmax(t):
        return torch.softmax(t, -1)

    def compiled(fn, **options):
        return torch.compile(fn, backend=COMPILE_BACKEND, **options)
    close(compiled(torch.func.vmap(generated.softmax), fullgraph=True)(x), softmax(x))
    close(compiled(torch.func.grad(weighted(generated.softmax)))(x[0]), torch.func.grad(weighted(softmax))(x[0]))
    close(compiled(torch.func.vmap(torch.func.grad(weighted(generated.softmax))))(x),
          torch.func.vmap(torch.func.grad(weighted(softmax)))(x))
    tangent = torch.randn_like(x)
    close(compiled(lambda t: torch.func.jvp(generated.softmax, (t,), (tangent,))[1])(x),
          torch.func.jvp(softmax, (x,), (tangent,))[1])


@pytest.mark.parametrize("name", CASES)
def test_batched_incoming_gradients_match_pytorchs(name):
    # torch.autograd.grad(is_grads_batched=True) (and jacobian(vectorize=True), built on it) runs
    # the backward under vmap: the derived math in PyTorch's ops, which a kernel's could not read.
    op, math, args = case(name)

    def gradients(fn):
        leaves = [a.clone().requires_grad_() for a in args]
        out = fn(*leaves)
        seeds = torch.randn(4, *out.shape, device=out.device, generator=torch.Generator(out.device).manual_seed(0))
        return torch.autograd.grad(out, leaves, seeds, is_grads_batched=True)
    for got, want in zip(gradients(op), gradients(math)):
        close(got, want)
    close(torch.autograd.functional.jacobian(op, args, vectorize=True)[0],
          torch.autograd.functional.jacobian(math, args, vectorize=True)[0])


def test_per_sample_gradients_of_a_model_built_of_generated_ops():
    # What a user writes for per-sample gradients (DP-SGD, influence functions): vmap over grad of
    # torch.func.functional_call, on a model whose layers are generated ops, against the same
    # model in PyTorch's own ops.
    import generated

    class Block(torch.nn.Module):
        def __init__(self, ours):
            super().__init__()
            generator = torch.Generator().manual_seed(0)
            self.w = torch.nn.Parameter(torch.randn(8, 6, generator=generator).to(DEVICE) / 3)
            self.bias = torch.nn.Parameter(torch.randn(6, generator=generator).to(DEVICE))
            self.scale = torch.nn.Parameter(torch.rand(6, generator=generator).to(DEVICE) + 0.5)
            self.ours = ours

        def forward(self, x):
            if self.ours:
                h = generated.matmul_bias_gelu(x, self.w, self.bias)
                return generated.rms_norm(h, self.scale, eps=1e-5)[0]
            h = F.gelu(x @ self.w + self.bias)
            return F.rms_norm(h, (6,), self.scale, eps=1e-5)

    def per_sample(model, x, y):
        params = {name: p.detach() for name, p in model.named_parameters()}

        def loss(params, sample, target):
            out = torch.func.functional_call(model, params, (sample[None],))
            return (out - target).square().sum()
        return torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, x, y)

    x, y = randn(5, 8), randn(5, 6)
    got, want = per_sample(Block(True), x, y), per_sample(Block(False), x, y)
    for name in want:
        assert got[name].shape == (5, *want[name].shape[1:])
        close(got[name], want[name])

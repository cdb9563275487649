"""Whether a matmul backward's dZ (the gradient through the epilogue) should be computed in the
products' operand loads (a prologue) rather than in a pass of its own. A matmul op's backward now
computes dZ = f'(...) * g once, into an [M, N] tensor, and runs dA = dZ @ B^T and dB = A^T @ dZ on
it. Fused, each product loads g and the value f' reads (relu: the output c; gelu: the kept
accumulator) in place of dZ and computes dZ tile by tile: no dZ pass and no dZ tensor, but twice
the operand bytes in each product's main loop and the math once per tile load, in both products.

One tiled kernel (pointer loads, grouped tile order) runs both ways, each over the same configs,
the fastest taken: separate = the dZ pass + dA + dB on dZ; fused = dA + dB, each computing dZ in
its prologue; beside them the dZ pass and torch.mm for both products (cuBLAS). Every result is
checked against PyTorch's float32 math first. bfloat16, microseconds (do_bench, median).

    PYTHONPATH=. python3 bench/probes/dz_prologue.py
"""
import torch
import triton
import triton.language as tl
import triton.testing

SHAPES = ((2048, 2048, 2048), (4096, 4096, 4096), (4096, 11008, 4096))  # M, N, K: A [M, K], B [K, N]
CONFIGS = ((128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 32, 4, 4), (256, 128, 64, 8, 3))  # BP BQ BR warps stages
KINDS = {"relu": 0, "gelu": 1}


@triton.jit
def _dz(g, s, KIND: tl.constexpr):
    """dZ from the incoming gradient g and the value the epilogue's derivative reads (relu: the
    output c; gelu: the accumulator), in float32."""
    g = g.to(tl.float32)
    s = s.to(tl.float32)
    if KIND == 0:
        return tl.where(s > 0, g, 0.0)
    cdf = 0.5 * (1.0 + tl.math.erf(s * 0.7071067811865476))
    pdf = tl.exp(-0.5 * s * s) * 0.3989422804014327
    return g * (cdf + s * pdf)


@triton.jit
def _dz_kernel(g_ptr, s_ptr, out_ptr, numel, KIND: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    dz = _dz(tl.load(g_ptr + offsets, mask=mask), tl.load(s_ptr + offsets, mask=mask), KIND)
    tl.store(out_ptr + offsets, dz.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _product_kernel(x_ptr, y_ptr, g_ptr, s_ptr, out_ptr, P, Q, R, sxp, sxr, syr, syq, sop, soq,
                    X_DZ: tl.constexpr, Y_DZ: tl.constexpr, KIND: tl.constexpr,
                    BP: tl.constexpr, BQ: tl.constexpr, BR: tl.constexpr, GROUP: tl.constexpr):
    # OUT[P, Q] = X[P, R] @ Y[R, Q]; X (or Y) computed from g and s, laid out as it, where X_DZ (Y_DZ).
    pid = tl.program_id(0)
    num_p = tl.cdiv(P, BP)
    num_q = tl.cdiv(Q, BQ)
    width = GROUP * num_q
    first = (pid // width) * GROUP
    size = min(num_p - first, GROUP)
    pid_p = first + (pid % width) % size
    pid_q = (pid % width) // size
    rp = pid_p * BP + tl.arange(0, BP)
    rq = pid_q * BQ + tl.arange(0, BQ)
    rr = tl.arange(0, BR)
    acc = tl.zeros((BP, BQ), tl.float32)
    for r0 in range(0, R, BR):
        x_off = rp[:, None] * sxp + (r0 + rr)[None, :] * sxr
        if X_DZ:
            x = _dz(tl.load(g_ptr + x_off), tl.load(s_ptr + x_off), KIND).to(g_ptr.dtype.element_ty)
        else:
            x = tl.load(x_ptr + x_off)
        y_off = (r0 + rr)[:, None] * syr + rq[None, :] * syq
        if Y_DZ:
            y = _dz(tl.load(g_ptr + y_off), tl.load(s_ptr + y_off), KIND).to(g_ptr.dtype.element_ty)
        else:
            y = tl.load(y_ptr + y_off)
        acc = tl.dot(x, y, acc)
    tl.store(out_ptr + rp[:, None] * sop + rq[None, :] * soq, acc.to(out_ptr.dtype.element_ty))


def product(x, y, out, g=None, s=None, x_dz=False, y_dz=False, kind=0, config=CONFIGS[0]):
    """out = x @ y (strided views), x or y standing for dZ computed from g and s (laid out as it)."""
    bp, bq, br, warps, stages = config
    (p, r), q = x.shape, y.shape[1]
    grid = (triton.cdiv(p, bp) * triton.cdiv(q, bq),)
    _product_kernel[grid](x, y, g if g is not None else x, s if s is not None else x, out, p, q, r,
                          x.stride(0), x.stride(1), y.stride(0), y.stride(1), out.stride(0), out.stride(1),
                          X_DZ=x_dz, Y_DZ=y_dz, KIND=kind, BP=bp, BQ=bq, BR=br, GROUP=8,
                          num_warps=warps, num_stages=stages)
    return out


def best(fn):
    """(the fastest config's time in us, that config) of fn(config) over CONFIGS."""
    times = [(1e3 * triton.testing.do_bench(lambda: fn(c), return_mode="median"), c) for c in CONFIGS]
    return min(times)


def reference_dz(g, s, kind):
    g, s = g.float(), s.float()
    if kind == 0:
        return torch.where(s > 0, g, 0.0)
    return g * (0.5 * (1 + torch.erf(s * 0.5 ** 0.5)) + s * torch.exp(-0.5 * s * s) * (2 * torch.pi) ** -0.5)


def main():
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    dtype = torch.bfloat16
    for m, n, k in SHAPES:
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=dtype) / k ** 0.25
        b = torch.randn(k, n, device="cuda", dtype=dtype) / k ** 0.25
        g = torch.randn(m, n, device="cuda", dtype=dtype)
        for name, kind in KINDS.items():
            s = (a @ b) if kind == 1 else torch.relu(a @ b)  # gelu reads the accumulator, relu the output
            dz = torch.empty_like(g)
            da, db = torch.empty(m, k, device="cuda", dtype=dtype), torch.empty(k, n, device="cuda", dtype=dtype)
            bt, at = b.t(), a.t()

            def dz_pass():
                _dz_kernel[(triton.cdiv(g.numel(), 4096),)](g, s, dz, g.numel(), KIND=kind, BLOCK=4096, num_warps=8)

            want = reference_dz(g, s, kind)
            dz_pass()
            want_da, want_db = want @ bt.float(), at.float() @ want
            checks = {
                "dz": (dz, want),
                "dA separate": (product(dz, bt, da), want_da),
                "dB separate": (product(at, dz, db), want_db),
                "dA fused": (product(g, bt, da.clone(), g, s, x_dz=True, kind=kind), want_da),
                "dB fused": (product(at, g, db.clone(), g, s, y_dz=True, kind=kind), want_db),
            }
            for label, (got, expected) in checks.items():
                err = (got.float() - expected).abs().max().item() / max(expected.abs().max().item(), 1e-6)
                if err > 2e-2:
                    raise AssertionError(f"{name} {m}x{n}x{k} {label}: relative error {err:.3g}")
            t_dz = 1e3 * triton.testing.do_bench(dz_pass, return_mode="median")
            t_da, c_da = best(lambda c: product(dz, bt, da, config=c))
            t_db, c_db = best(lambda c: product(at, dz, db, config=c))
            f_da, fc_da = best(lambda c: product(g, bt, da, g, s, x_dz=True, kind=kind, config=c))
            f_db, fc_db = best(lambda c: product(at, g, db, g, s, y_dz=True, kind=kind, config=c))
            mm_da = 1e3 * triton.testing.do_bench(lambda: torch.mm(dz, bt, out=da), return_mode="median")
            mm_db = 1e3 * triton.testing.do_bench(lambda: torch.mm(at, dz, out=db), return_mode="median")
            separate, fused = t_dz + t_da + t_db, f_da + f_db
            print(f"{name} {m}x{n}x{k}: separate {separate:.1f} us (dZ pass {t_dz:.1f}, dA {t_da:.1f} {c_da}, "
                  f"dB {t_db:.1f} {c_db}); fused {fused:.1f} us (dA {f_da:.1f} {fc_da}, dB {f_db:.1f} {fc_db}); "
                  f"fused / separate {fused / separate:.3f}; dZ pass + torch.mm {t_dz + mm_da + mm_db:.1f} "
                  f"(dA {mm_da:.1f}, dB {mm_db:.1f})", flush=True)


if __name__ == "__main__":
    main()

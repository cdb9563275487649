"""The launch logic of each kind of op, the same for every op of the kind: layouts, the config
key, constexprs, the grid, and learning the call for the compiled call path.

A generated module makes one of these per op with what varies (its kernels, its config space and
table, its spec's block names, masks and schedule), and its wrapper checks, allocates and calls
`run`.
"""

import torch
import triton.language as tl
from triton.runtime.errors import OutOfResources

from . import library
from .axis import reduce_along
from .batch import batch_shape, folded, matrices
from .callpath import CallPath
from .checks import broadcast_leading, check_float_range, float64_math
from .configs import (ACROSS_ROWS, ConfigChooser, across_rows_config, block_for_streams, column_sums_tile,
                      fixed_row_length, lighter_forms, row_unroll)
from .device import cdiv, device_facts
from .launch import Kernel, split_k_workspace
from .sizes import hint, known, smaller
from .sync import grid_wait_allowed
from .layout import (MAX_STRIDED_RANK, batch_descriptors_fit, collapse, described_operand, k_rows_load_wide,
                     needs_int64, offsets_along_fit, pad_after_first, size_factor, stride_factor, tma_loads_fit,
                     tma_orientation, tma_stores_fit)
from ..schema import bucket, store_bit


# Every op made, by the module its kernels are defined in (op_of); a module's backward kernel's
# op likewise (backward_op_of).
_REGISTRY = {}
_BACKWARDS = {}


def op_of(module_name):
    """The runtime object of the op whose generated module is `module_name` (e.g.
    "generated.add"): the hook tools (tune, bench) use to reach its configs and call path."""
    try:
        return _REGISTRY[module_name]
    except KeyError:
        raise LookupError(f"no tilegen op is defined in module {module_name!r} (is it imported?)") from None


def backward_op_of(module_name):
    """The runtime object of the backward kernel of the op whose generated module is
    `module_name` (`tilegen tune --backward` tunes its configs)."""
    try:
        return _BACKWARDS[module_name]
    except KeyError:
        raise LookupError(f"no tilegen backward kernel is defined in module {module_name!r}") from None


class Op:
    """What every op has: its name, its config chooser and its compiled call path. `fast(*args)`
    is the call path's entry: the result of a call with a learned signature, else None."""

    def __init__(self, name, configs: ConfigChooser, kernel, listed=True, fp_fusion=True, scalars=()):
        self.name = name
        # (name, "float" or "int") per scalar argument, in the order runs take them: a float's
        # range is checked at launch, where the math's dtype is known (checks.check_float_range).
        # A backward takes the scalars its forward checked: it names none.
        self.scalars = tuple(scalars)
        self.configs = configs
        self.fp_fusion = fp_fusion  # (Kernel: False where the op's backward decides on fused math)
        self.call_path = CallPath()
        # A changed choice (a forced config, another mode) makes learned calls stale.
        configs.on_change.append(self.call_path.forget)
        self.module = getattr(getattr(kernel, "fn", kernel), "__module__", None)
        # A backward's op is not the one tools reach through its module, but tune reaches it as
        # the module's backward.
        (_REGISTRY if listed else _BACKWARDS)[self.module] = self

    def fast(self, *args):
        return self.call_path.call(*args)

    def _kernel(self, fn):
        return Kernel(fn, self.fp_fusion)

    def paths(self) -> tuple:
        """Every compiled call path of the op (a matmul has more: training calls, products)."""
        return (self.call_path,)

    def _learn(self, call, launched, result, path=None):
        """Hand a served call to `path` (the op's call path by default) to learn, where there is one."""
        if call is not None:
            (path or self.call_path).learn(call, launched, result)


def stored_outputs(outputs, stores, selective):
    """(the STORES constexpr, the positions of the outputs it stores) for a run of `outputs`:
    where `selective` (a backward kernel, whose every output is a gradient) the kernel stores only
    those `stores` says (None: all; schema.store_bit); the others are placeholders of no
    elements, passed for their pointers and never written. A kernel that is not selective stores
    every output (and takes no STORES: None)."""
    if not selective:
        return None, range(len(outputs))
    if stores is None:
        stores = (True,) * len(outputs)
    if len(stores) != len(outputs):
        raise ValueError(f"stores: {len(stores)} flags for {len(outputs)} outputs")
    return sum(store_bit(i) for i, s in enumerate(stores) if s), [i for i, s in enumerate(stores) if s]


# What decides an elementwise or reduction op's math dtype, for the errors that depend on it.
_MATH_DTYPE_RULE = "float32 for float16, bfloat16 and float32 tensors; float64 for float64 ones"


class ElementwiseOp(Op):
    """An op over tensors of one shape: the flat kernel where every tensor is contiguous, the
    strided one (up to MAX_STRIDED_RANK collapsed dims) elsewhere.

    `block` is the spec's block name; `mask` the spec's policy for the tiled axis: "auto" (a
    mask only where the size does not divide the block), "always" or "never" (the wrapper
    checks divisibility); `compute` the floor of the math's precision. A backward kernel
    (`selective`) takes `reads`: per input, the STORES bits of the outputs that read it, or None
    for one every output reads; it loads an input only where one of those is stored, so a call
    may pass a shape-only stand-in (autograd.shape_only) for an input it does not read."""

    def __init__(self, name, kernel, strided_kernel, configs, *, block="BLOCK", mask="auto", compute=tl.float32,
                 listed=True, fp_fusion=True, scalars=(), selective=False, reads=None):
        super().__init__(name, configs, kernel, listed, fp_fusion, scalars)
        self.kernel, self.strided_kernel = self._kernel(kernel), self._kernel(strided_kernel)
        self.block, self.mask, self.compute = block, mask, compute
        self.exact_key = mask == "never"
        self.selective = selective  # a backward kernel: it takes STORES (stored_outputs)
        if reads is not None and not selective:
            raise ValueError(f"{name}: reads= is a backward kernel's (selective=True), whose STORES it is read with")
        self.reads = reads

    def run(self, inputs, outputs, scalars=(), call=None, result=None, stores=None):
        """Compute `outputs` (checked or allocated by the wrapper) from `inputs` and `scalars`.
        With `call` (the wrapper's arguments) and `result` (what it returns), the compiled call
        path learns the call. A selective kernel stores only the outputs `stores` says (the others
        are placeholders: stored_outputs)."""
        store_bits, stored = stored_outputs(outputs, stores, self.selective)
        if not stored:
            return
        shape = outputs[stored[0]].shape
        numel = outputs[stored[0]].numel()  # (symbolic where traced with dynamic shapes: runtime.sizes)
        if known(numel == 0):
            return
        tensors = (*inputs, *outputs)
        # The inputs no stored output reads: the kernel does not load them (a stand-in may stand there).
        unread = {i for i, bits in enumerate(self.reads) if bits is not None and not bits & store_bits} if self.reads else ()
        layout = None
        if not all(t.is_contiguous() for i, t in enumerate(tensors) if i not in unread):
            # A placeholder is addressed nowhere: stride 0 in every dim.
            placeholders = {len(inputs) + i for i in range(len(outputs)) if i not in stored}.union(unread)
            layout = collapse(list(shape), [[0] * len(shape) if i in placeholders else list(t.stride())
                                            for i, t in enumerate(tensors)])
            if len(layout[0]) > MAX_STRIDED_RANK:
                # More independent dims than the strided kernel indexes: compute on contiguous copies.
                fresh = [torch.empty(o.shape, dtype=o.dtype, device=o.device) if i in stored else o
                         for i, o in enumerate(outputs)]
                self.run([t if i in unread else t.contiguous() for i, t in enumerate(inputs)], fresh, scalars,
                         stores=stores)
                for i in stored:
                    outputs[i].copy_(fresh[i])
                return
        key = (hint(numel) if self.exact_key else bucket(hint(numel)), inputs[0].element_size())

        facts = device_facts(outputs[0].device)

        def launch(config):
            if layout is not None:
                config = self._for_broadcast(config, tensors, layout[1], key, facts)
            return self._launch(tensors, scalars, numel, layout, config, store_bits)

        traced = library.traced(tensors)
        config = self.configs.choose(key, facts, None if traced else launch, traced)
        self._learn(call, launch(config), result)

    def _for_broadcast(self, config, tensors, strides, key, facts):
        """`config` as a call launches it: its block longer where inputs are broadcast (a stride 0
        in the collapsed layout; runtime.configs.block_for_streams). Every choice goes through
        here (a table's, the heuristic's, autotune's timings, a forced one, tune's), so tables
        hold what a call that streams every tensor takes."""
        streamed = [t for t, per_tensor in zip(tensors, strides) if not any(known(s == 0) for s in per_tensor)]
        if len(streamed) == len(tensors):
            return config
        offered = {c[self.block] for c in self.configs.candidates(facts, key)}
        block = block_for_streams(config[self.block], offered, 32 * config["num_warps"],
                                  sum(t.element_size() for t in streamed))
        return config if block == config[self.block] else {**config, self.block: block}

    def _launch(self, tensors, scalars, numel, layout, config, stores=None):
        block = config[self.block]
        math_64 = float64_math(self.name, self.compute == tl.float64, tensors)
        check_float_range(self.name, self.scalars, scalars, math_64, _MATH_DTYPE_RULE)
        constexprs = {self.block: block, "EVEN": self._even(numel, block),
                      "INDEX_64": needs_int64(*tensors, extra=block), "MATH_64": math_64}
        if stores is not None:
            constexprs["STORES"] = stores
        varying = len(tensors) + len(scalars)
        if layout is None:
            return self.kernel.launch((cdiv(numel, block),), (*tensors, *scalars, numel), varying, constexprs,
                                      config["num_warps"])
        sizes, strides = layout
        sizes = pad_after_first(sizes, MAX_STRIDED_RANK, 1)
        flat_strides = [s for per_tensor in strides for s in pad_after_first(per_tensor, MAX_STRIDED_RANK, 0)]
        line = sizes[-1]
        lines = self._by_lines(line, block)
        if lines:
            constexprs["EVEN"] = self._even(line, block)
            grid = ((numel // line) * cdiv(line, block),)
        else:
            grid = (cdiv(numel, block),)
        args = (*tensors, *scalars, numel, *sizes[1:], *flat_strides)
        return self.strided_kernel.launch(grid, args, varying, {**constexprs, "LINES": lines}, config["num_warps"])

    def _even(self, length, block):
        """Whether blocks tile `length` exactly (the kernel then masks nothing): as the spec's mask
        policy says ("never": the wrapper checked the op's size divides the block)."""
        return {"always": False, "never": True}.get(self.mask, known(length % block == 0))

    def _by_lines(self, line, block):
        """Whether the strided kernel's blocks lie along lines of its last dim (`line` elements,
        runtime.strided): where a line holds a block, so each program's indices in the other dims
        are one division each, not one an element. Under the mask policy "never" only where blocks
        tile a line exactly (the kernel then has no mask)."""
        if self.mask == "never":
            return known(line % block == 0)
        return known(line >= block)


class MatmulOp(Op):
    """C = epilogue(A @ B, extras): one kernel, tiled or persistent, split-K where the config
    says, operands through pointers or tensor descriptors.

    `blocks` are the spec's block names for M, N, K; `masks` its policies for them ("auto",
    "always", "never"); `launch` its schedule.launch ("auto", "tiled", "persistent");
    `operands` the positions of A and B among the tensors (inputs, then outputs), `ranks` their
    dims; `factors` the
    kernel's constexpr names for the power-of-two factors of M, N, K and each tensor's strides.

    The backward's products (`product`) run the same kernel with its epilogue off, choosing
    configs with `products` (masks where needed on every axis: a product's axes are the op's,
    permuted); `output` is the position of the first output among the tensors, which such a
    launch writes, and `placeholders` stand for the scalars it does not read."""

    def __init__(self, name, kernel, configs, *, factors, blocks=("BM", "BN", "BK"), masks=("auto",) * 3,
                 group_m=8, launch="auto", operands=(0, 1), output=2, ranks=None, placeholders=(),
                 products=None, listed=True, along_rows=None, batched=(), fp_fusion=True, scalars=()):
        super().__init__(name, configs, kernel, listed, fp_fusion, scalars)
        self.kernel = self._kernel(kernel)
        self.factor_names = tuple(factors)
        self.blocks, self.masks, self.group_m = tuple(blocks), tuple(masks), group_m
        self.schedule, self.operands = launch, operands
        self.output, self.placeholders = output, tuple(placeholders)
        self.ranks = None if ranks is None else tuple(ranks)
        # A batched op ([..., M, K] @ [..., K, N]): which tensors the kernel steps through the
        # batch (the spec's "..." ones, a batch stride each), and which lie along M (they fold
        # into M with the batch where their layout allows).
        self.batched = tuple(batched)
        self.along_rows = None if along_rows is None else tuple(along_rows)
        self.products = products if products is not None else configs
        # Training calls and the backward's products (rounded, or the float32 accumulator itself)
        # have compiled call paths of their own: their results differ for the same arguments.
        self.training_path, self.product_path, self.exact_product_path = CallPath(), CallPath(), CallPath()
        # {(key, kernel variant): (the chosen config, the form of it launched)}: a lighter form
        # where the variant's kernel needs more shared memory than the GPU has for the config.
        self._lighter = {}
        for chooser in {id(configs): configs, id(self.products): self.products}.values():
            chooser.on_change.extend([*(path.forget for path in self._own_paths()), self._lighter.clear])

    def run(self, tensors, scalars, M, N, K, call=None, result=None, saved=None, batch=()):
        """Compute the outputs (the last of `tensors`, checked or allocated by the wrapper).
        With `call` and `result`, the compiled call path learns the call. With `saved` (a
        contiguous [..., M, N] tensor), the kernel also stores the accumulator there, before the
        epilogue: what the backward of a training call reads (such calls are learned by a call
        path of their own: their signature is the op's, their result holds `saved` too).
        `batch`: a batched op's batch shape (the tensors' batch axes broadcast to it)."""
        check_float_range(self.name, self.scalars, scalars, False, "a matmul's accumulator is float32")
        self._run(tensors, scalars, M, N, K, self.masks, self.configs, call, result, saved=saved, batch=batch)

    def paths(self) -> tuple:
        return (self.call_path, *self._own_paths())

    def _own_paths(self) -> tuple:
        """The call paths a matmul has beyond the forward's (which Op's forgets on a change of
        its chooser): training calls, the backward's rounded and float32 products."""
        return (self.training_path, self.product_path, self.exact_product_path)

    def fast_training(self, *args):
        """A training call (the op and its accumulator) with a learned signature, else None."""
        return self.training_path.call(*args)

    def product(self, x, y, exact=False):
        """x @ y (any strides, x's dtype; for a batched op, [..., M, K] @ [..., K, N] with batch
        axes broadcast), with this op's kernel, tables and heuristics, its epilogue off: the
        products of the backward (dA = dZ @ B^T, dB = A^T @ dZ, a recomputed A @ B). `exact`: in
        float32, the accumulator as the forward's epilogue saw it (a backward that decides on
        it: derivatives.decided_beyond_sign), so with the forward's own chooser and masks: the
        config the forward launched, whose K steps add up in the same order (the products' own
        choice, a split of K or another K block, would round some elements differently, and a
        decision at them would route their gradients unlike the forward's output). Repeat calls
        take the compiled call path."""
        if self.ranks is None:
            raise ValueError(f"{self.name}: a backward product needs the op's tensor ranks (MatmulOp(ranks=...))")
        call = (x, y, *self.placeholders)
        path = self.exact_product_path if exact else self.product_path
        served = path.call(*call)
        if served is not None:
            return served
        M, K = x.shape[-2:]
        batch = batch_shape(self.name, (("x", x), ("y", y)), (2, 2)) if self.batched else ()
        out = torch.empty((*batch, M, y.shape[-1]), dtype=torch.float32 if exact else x.dtype, device=x.device)
        # `out` stands in for each tensor the epilogue would read (the kernel never reads them),
        # and the placeholders for its scalars.
        tensors = [out] * len(self.ranks)
        tensors[self.operands[0]], tensors[self.operands[1]] = x, y
        masks, chooser = (self.masks, self.configs) if exact else (("auto",) * 3, self.products)
        self._run(tensors, self.placeholders, M, y.shape[-1], K, masks, chooser, call=call,
                  result=out, epilogue=False, batch=batch, path=path)
        return out

    def gradient(self, x, y, shape):
        """x @ y summed over its batch axes to `shape`: an operand's gradient in a batched op's
        backward (dA = dZ @ B^T, dB = A^T @ dZ). A 2-D operand's gradient sums over the whole
        batch, which one product does: the batch joins the contracted axis ([K, B*M] @ [B*M, N])."""
        if len(shape) == 2 and (x.dim() > 2 or y.dim() > 2):
            batch = torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
            rows, inner, cols = x.shape[-2], x.shape[-1], y.shape[-1]
            x = x.expand(*batch, rows, inner).transpose(-2, -1).reshape(-1, rows).t()
            y = y.expand(*batch, inner, cols).reshape(-1, cols)
        return self.product(x, y)

    def _run(self, tensors, scalars, M, N, K, masks, configs, call=None, result=None, saved=None,
             epilogue=True, batch=(), path=None):
        # (symbolic where traced with dynamic shapes: runtime.sizes)
        if any(known(size == 0) for size in (M, N, *batch)):
            return
        if known(K == 0) and not epilogue:  # an empty sum: the backward's product of empty operands
            tensors[self.output].zero_()
            return
        # (`saved` is contiguous: the kernel finds each matrix's accumulator from M and N.)
        views, pointers, write_back, count = self._views(tensors, M, batch, epilogue)
        if write_back:
            call = None  # a copy's address changes from call to call: nothing to learn
        a = views[self.operands[0]]
        rows = a.shape[0] if self.batched and count == 1 else M  # a folded batch: count * M rows
        key = tuple(hint(size) if policy == "never" else bucket(hint(size))
                    for size, policy in zip((rows, N, K), masks))
        key += ((bucket(hint(count)),) if not known(count == 1) else ()) + (a.element_size(),)
        traced = library.traced(tensors)

        def launch(config):
            return self._launch(pointers, views, scalars, rows, N, K, config, traced, masks, saved, epilogue, count)

        config = configs.choose(key, device_facts(a.device), None if traced else launch, traced)
        variant = (key, epilogue, saved is not None)
        fitted = self._lighter.get(variant)
        if fitted is not None and fitted[0] is config:
            launched = launch(fitted[1])
        elif configs.forced is not None or traced:
            launched = launch(config)
        else:
            launched = self._launch_fitting(launch, config, variant)
        if path is None:
            path = self.product_path if not epilogue else self.call_path if saved is None else self.training_path
        self._learn(call, launched, result, path)
        for target, source in write_back:
            target.copy_(source.view(target.shape))

    def _launch_fitting(self, launch, config, variant):
        """Launch `config`, or where the GPU lacks the shared memory its kernel variant needs
        (compiling tells: the table's and the heuristic's configs are chosen for the op's plain
        forward, and a training call also stores its accumulator), the first of its lighter forms
        that fits; remember which for the variant and key (a traced call then takes it too)."""
        try:
            launched = launch(config)
            form = config
        except OutOfResources as exc:
            for form in lighter_forms(config):
                try:
                    launched = launch(form)
                    break
                except OutOfResources:
                    continue
            else:
                raise RuntimeError(f"{self.name}: no form of launch config {config} fits the GPU's shared memory "
                                   f"at key {variant[0]} ({exc})") from exc
        self._lighter[variant] = (config, form)
        return launched

    def _views(self, tensors, M, batch, epilogue):
        """How the kernel reads each tensor: (views, the tensors passed as its pointers, [(an
        output, the copy written in its place)], matrices in the launch). A plain op's tensors are
        their own views; a batched op's are [matrices, ...] views of the flattened batch, folded
        into one matrix of matrices * M rows where every layout allows it (count 1)."""
        if not self.batched:
            return list(tensors), list(tensors), [], 1
        ranks = self.ranks or [t.dim() for t in tensors]
        # A product's stand-ins for the epilogue inputs are never read: they neither copy nor keep
        # the batch from folding, and take the output's layout.
        real = [epilogue or index in self.operands or index == self.output for index in range(len(tensors))]
        views, pointers, write_back = [], [], []
        for index, (tensor, rank) in enumerate(zip(tensors, ranks)):
            view, copied = matrices(tensor, batch, rank) if real[index] else (None, False)
            views.append(view)
            pointers.append(view if copied else tensor)
            if copied and index >= self.output:
                write_back.append((tensor, view))
        along = [rows for rows, keep in zip(self.along_rows, real) if keep]
        kept = folded([v for v in views if v is not None], M, along)
        count = 1 if kept is not None else views[self.operands[0]].shape[0]
        if kept is not None:
            views = [kept.pop(0) if keep else None for keep in real]
        out = views[self.output]
        stand_in = out[..., 0, :] if out.dim() == 3 else out[0]  # (for a rank-1 input: any row of the output)
        views = [v if v is not None else out if ranks[i] == 2 else stand_in for i, v in enumerate(views)]
        return views, pointers, write_back, count

    def loads_through_descriptors(self, config, a, b, traced=False):
        """Whether `config` loads operands `a` and `b` through tensor descriptors: it asks for
        them (TMA) and their layout allows them; otherwise the kernel loads through pointers.
        A traced launch loads through pointers: the layout of the data it will see is unknown."""
        return bool(config.get("TMA")) and not traced and tma_loads_fit(a, b)

    def stores_through_descriptors(self, config, outputs):
        """Whether `config` stores `outputs` (each a matrix, or a batch of them as [matrices, rows,
        cols]) through tensor descriptors, where its operands load through them: it asks for them
        (TMA_STORE) and the outputs' layouts allow them."""
        return bool(config.get("TMA_STORE")) and tma_stores_fit(outputs)

    def _launch(self, pointers, views, scalars, M, N, K, config, traced=False, masks=None, saved=None,
                epilogue=True, count=1):
        """One launch over `count` matrices (M, N, K each): `views` are the tensors as the kernel
        indexes them ([count, ...] where count > 1), `pointers` what it is passed for them."""
        bm, bn, bk = (config[name] for name in self.blocks)
        split_k = config.get("SPLIT_K", 1)
        stacked = not known(count == 1)  # views of [count, ...] (a batch that did not fold)
        tiles = cdiv(M, bm) * cdiv(N, bn) * count
        matrix = [v[0] if stacked else v for v in views]  # (one matrix: its layout facts)
        a, b = (matrix[i] for i in self.operands)
        # A batch of matrices (count > 1) loads through 3-D descriptors, a matrix a box.
        use_tma = self.loads_through_descriptors(config, a, b, traced) and (
            not stacked or batch_descriptors_fit(*(views[i] for i in self.operands)))
        # A column-major operand is described as its transpose (the kernel transposes its tiles).
        trans_a, trans_b = (use_tma and tma_orientation(t) == "columns" for t in (a, b))
        # Outputs (all the epilogue's, or a product's one) go out through descriptors where the
        # config asks for it with its loads and every output's layout allows it.
        stored = range(self.output, len(views)) if epilogue else (self.output,)
        use_tma_store = use_tma and self.stores_through_descriptors(config, [views[i] for i in stored])
        persistent = {"tiled": False, "persistent": True}.get(self.schedule, bool(config.get("PERSISTENT")))
        # A column-major operand through descriptors (a backward's dA = dZ @ B^T, dB = A^T @ dZ)
        # launches persistent: the tiled launch of the tables' tiles took 1.19x its time for dA at
        # 4096^3 and 1.15x at 4096x11008x4096, 1.04x for dB (bench/probes/transposed_schedules.txt).
        # (Not an 8-bit B: column-major is its K-major layout, which the tables' own tunes time
        # with both launches.)
        persistent = persistent or (self.schedule != "tiled" and (trans_a or trans_b) and a.element_size() > 1)
        persistent = persistent and split_k == 1  # split-K always launches tiled
        # Persistent: one program per multiprocessor (fewer where there are fewer tiles).
        device = pointers[0].device
        grid = (smaller(tiles, device_facts(device)[0]), 1) if persistent else (tiles, split_k)
        mask_m, mask_n, mask_k = ({"always": True, "never": False}.get(policy, not known(size % block == 0))
                                  for policy, size, block in zip(masks or self.masks, (M, N, K), (bm, bn, bk)))
        # Each tensor's strides, as many as its rank in the kernel (a stand-in may have more).
        ranks = self.ranks or [t.dim() for t in views]
        strides = [s for t, rank in zip(matrix, ranks) for s in t.stride()[t.dim() - rank:]]
        factors = [size_factor(v) for v in (M, N, K)] + [stride_factor(s) for s in strides]
        quotients = [v // f for v, f in zip((M, N, K, *strides), factors)]
        constexprs = {
            self.blocks[0]: bm, self.blocks[1]: bn, self.blocks[2]: bk, "GROUP_M": self.group_m,
            "SPLIT_K": split_k, "MASK_M": mask_m, "MASK_N": mask_n, "MASK_K": mask_k,
            # Where K rows load wide, whole K steps run unmasked and the partial one apart.
            "PEEL_K": mask_k and k_rows_load_wide(a, b, assume_aligned=traced), "USE_TMA": use_tma,
            "TRANS_A": trans_a, "TRANS_B": trans_b, "USE_TMA_STORE": use_tma_store,
            "INDEX_64": needs_int64(*views, extra=bk), "PERSISTENT": persistent,
            "FLATTEN": persistent and bool(config.get("FLATTEN")),
            "EPILOGUE": epilogue, "SAVE_ACC": saved is not None,
            **dict(zip(self.factor_names, factors)),
        }
        batching = []
        if self.batched:
            # The matrices of the launch, and each batched tensor's stride between them.
            constexprs["BATCHED"] = stacked
            batching = [count] + [views[i].stride(0) if stacked else 0 for i in self.batched]
        if split_k == 1 and not traced:
            workspace = (None, None)  # no partial sums: the split-K arguments are never read
        elif split_k == 1:
            # A traced launch passes tensors (never read) rather than None: empty ones, which a
            # compiled graph allocates without running a kernel (zeroed counters took a fill kernel
            # beside the op's in some compiled graphs: tests/test_runtime.py checks it runs alone).
            workspace = (torch.empty(1, dtype=torch.float32, device=device),
                         torch.empty(1, dtype=torch.int32, device=device))
        else:
            workspace = split_k_workspace(device, tiles * split_k * bm * bn, tiles, fresh=traced)
        head = list(pointers)
        if use_tma:
            head[self.operands[0]] = described_operand(views[self.operands[0]], (bm, bk), trans_a)
            head[self.operands[1]] = described_operand(views[self.operands[1]], (bk, bn), trans_b)
        if use_tma_store:
            for i in stored:
                head[i] = described_operand(views[i], (bm, bn), False)
        # Where nothing is saved the output stands in (never written): a tensor, so that the
        # binary takes the parameter on every call (only leading None arguments may be dropped
        # for the compiled call path to learn a launch) and traced launches pass no None.
        args = (*workspace, pointers[self.output] if saved is None else saved, *head, *scalars, *batching, *quotients)
        varying = 3 + len(pointers) + len(scalars)  # the workspace, the saved accumulator, tensors, scalars
        return self.kernel.launch(grid, args, varying, constexprs, config["num_warps"], config["num_stages"])


class ReductionOp(Op):
    """An op over rows: each program reduces blocks of ROWS rows of the reduced axis (length N),
    loading a row that fits its tile once (ONE_TILE: the config's block holds N) and passing over
    a longer one in block-sized steps, UNROLL blocks a loop trip (configs.row_unroll): the
    trip's blocks are a tl.static_range, so their loads are issued together. Rows held whole go
    to a program a row block, or to the config's PER_SM programs a multiprocessor, each issuing
    its next block's loads before this block's math (AHEAD). A config may compile a power-of-two
    row length in (FIXED_N: configs.fixed_row_length), give a looped row's loads cache hints
    (EVICT: reduction_lowering's _KEEP and _LAST), and loop along a row its block holds (LOOP).

    `roles` gives each tensor (inputs, then outputs) its lie along the rows: "element" ([..., N]),
    "column" ([N], the same for every row), "row" ([...], one value per row), or, for a
    backward's output, "column_sum" ([N]: the sum over the rows). Where rows are held whole, each
    program adds up its rows' columns in a workspace row of its own and the programs' rows are
    then added up in a fixed order, on a GPU by every program a share of the columns after a
    grid-wide wait, in the interpreter by the last program to finish. Where rows loop, each
    program leaves its rows' values (`row_values` of them) in the workspace, and the finish sums
    strips of columns down every row. One launch, the same sum every run; the workspace is
    split-K's, per stream. The
    kernel reads element tensors as [R, N] through two strides, column and row tensors through
    one; `run` makes those views (copies where leading axes do not merge into one row stride) and
    writes results it could not view back into the outputs. `block` is the spec's block name."""

    # Programs per multiprocessor where programs loop over rows to sum columns and the last to
    # arrive finishes the sums (the interpreter; on a GPU: one, all resident).
    SUM_PROGRAMS_PER_SM = 2

    def __init__(self, name, kernel, configs, *, roles, block="BLOCK", compute=tl.float32, listed=True,
                 row_values=0, column_reads=0, kept=0, read_back=None, fp_fusion=True, scalars=(), selective=False):
        super().__init__(name, configs, kernel, listed, fp_fusion, scalars)
        self.selective = selective  # a backward kernel: it takes STORES (stored_outputs)
        # None, or the outputs a looped row's outputs' pass loads back in place of the inputs they
        # are computed from (rows.read_back), after its first pass stored them (with any other
        # outputs it can store early): done where exact, each stored in the math's own dtype
        # (float32, or float64 where the math runs in it).
        self.read_back = None if read_back is None else tuple(read_back)
        self.kernel = self._kernel(kernel)
        self.row_values = row_values  # a backward's: the values a long row leaves for its column sums
        self.column_reads = column_reads  # and the inputs along the rows its column phase reads
        self.roles, self.block, self.compute = tuple(roles), block, compute
        # The kernel's tensors: the op's, then the values per row it stores beyond its outputs
        # (`kept`: sums its backward's decisions read, reduction_lowering.kept_statistics).
        self.tensor_roles = self.roles + ("row",) * kept
        self.sums_columns = "column_sum" in self.roles  # (a backward's weight gradient)

    @staticmethod
    def reduces_last(dim):
        """Whether a wrapper's `dim=` is the default, -1: the kernels' own axis. (A method, not an
        expression in the wrapper: a spec may name a parameter `type`, and torch.compile traces
        the call either way.)"""
        return type(dim) is int and dim == -1

    def along(self, wrapper, dim, inputs, scalars, out):
        """The public `wrapper`'s call reducing axis `dim` of the rows instead of the last
        (runtime.axis.reduce_along): `inputs` {name: value} in order, `scalars` {name: value}."""
        return reduce_along(self.name, self.roles, wrapper, dim, inputs, scalars, out)

    def shape(self, op, named):
        """(the rows' leading shape, N) of a call with the tensors `named` ([(name, tensor)] in
        input order): element tensors' leading axes and row tensors' shapes broadcast as in
        PyTorch. Raises ValueError naming the argument that does not."""
        rows, n = [], None
        for (name, value), role in zip(named, self.roles):
            if role == "column":
                continue
            rows.append((name, tuple(value.shape[:-1]) if role == "element" else tuple(value.shape)))
            if role == "element" and n is None:
                n = value.shape[-1]
        lead = broadcast_leading(op, rows, "rows of shape", "the rows of", "shapes broadcast as in PyTorch")
        return lead, n

    def math_dtype(self, tensors) -> torch.dtype:
        """The dtype the kernel's math runs in over `tensors`: what a value it stores for itself
        (a sum its backward reads again) is kept in, exactly."""
        return torch.float64 if float64_math(self.name, self.compute == tl.float64, tensors) else torch.float32

    def run(self, inputs, outputs, scalars, lead, n, call=None, result=None, stores=None):
        """Compute `outputs` (checked or allocated by the wrapper, in their own shapes) from
        `inputs` and `scalars` over rows of leading shape `lead` and length `n`. With `call`
        (the wrapper's arguments) and `result` (what it returns), the compiled call path learns
        the call. A selective kernel stores only the outputs `stores` says (the others are
        placeholders: stored_outputs); a column sum not stored is not summed."""
        store_bits, stored = stored_outputs(outputs, stores, self.selective)
        if not stored:
            return
        rows = 1  # (symbolic where traced with dynamic shapes: runtime.sizes)
        for size in lead:
            rows *= size
        if known(rows == 0):
            for index, (output, role) in enumerate(zip(outputs, self.tensor_roles[len(inputs):])):
                if role == "column_sum" and index in stored:
                    output.zero_()  # a sum over no rows
            return
        # The kernel reads each tensor through its pointer and the strides of its view. A view
        # starts where its tensor does, so the tensor itself is passed (the compiled call path then
        # finds it among the call's arguments or results); a copy is passed as it is.
        views, pointers, write_back, copied = [], [], [], False
        traced = library.traced((*inputs, *outputs))  # stand-ins have no data to compare
        placeholders = {len(inputs) + i for i in range(len(outputs)) if i not in stored}
        for index, tensor in enumerate((*inputs, *outputs)):
            role = self.tensor_roles[index]
            if index in placeholders:  # addressed nowhere: a view of no elements, its strides 0
                width = 2 if role == "element" else 1
                views.append(tensor.as_strided((0,) * width, (0,) * width))
                pointers.append(tensor)
                continue
            if role == "column_sum":  # (its buffer is made per launch)
                views.append(tensor)
                pointers.append(tensor)
                continue
            if role == "column":
                view = tensor if traced or offsets_along_fit(tensor.stride(0), n) else tensor.contiguous()
                copied = copied or view is not tensor
                views.append(view)
                pointers.append(view)
                continue
            shape = (rows, n) if role == "element" else (rows,)
            if index < len(inputs):
                full = (*lead, n) if role == "element" else tuple(lead)
                view = tensor.expand(full).reshape(shape)
                if role == "element" and not traced and not offsets_along_fit(view.stride(1), n):
                    view = view.contiguous()  # elements too far apart for the kernel's offsets
            else:
                try:
                    view = tensor.view(shape)
                    if role == "element" and not traced and not offsets_along_fit(view.stride(1), n):
                        raise RuntimeError("elements too far apart for the kernel's offsets")
                except RuntimeError:  # an out= whose layout does not flatten: computed apart, then copied
                    view = torch.empty(shape, dtype=tensor.dtype, device=tensor.device)
                    write_back.append((tensor, view))
            aliased = not traced and (view.numel() > 0 and view.data_ptr() == tensor.data_ptr() and
                                      view.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr())
            copied = copied or not aliased
            views.append(view)
            pointers.append(tensor if aliased else view)
        key = (bucket(hint(n)), bucket(hint(rows)), inputs[0].element_size())
        # The column sums: every one the kernel has where it stores any (each keeps its place in
        # the workspace; one not stored is not summed), none where it stores none.
        sums = [i for i, role in enumerate(self.tensor_roles) if role == "column_sum"]
        if all(i in placeholders for i in sums):
            sums = []

        def launch(config):
            return self._launch(views, pointers, scalars, rows, n, config, sums, store_bits)

        config = None
        apart = self._read_across(views[:len(inputs)]) if hint(rows) >= ACROSS_ROWS else ()
        if apart and not sums:
            # (tables and tuning know rows laid out along the reduced axis only)
            config = self.configs.forced or across_rows_config(self.block, hint(n))
        for index in apart if sums else ():
            # A backward that also sums columns (a weight's gradient) runs the configs its table
            # and tuning know, a few rows a step, which would read such rows a sector an
            # element: it reads copies in row-major order.
            views[index] = pointers[index] = views[index].contiguous()
            copied = True
        if config is None:
            config = self.configs.choose(key, device_facts(views[0].device), None if traced else launch, traced)
        launched = launch(config)
        for tensor, fresh in write_back:
            tensor.copy_(fresh.view(tensor.shape))
        # A call that read a copy is not learned: a repeat would read the first call's copy.
        self._learn(None if copied else call, launched, result)

    def _read_across(self, views):
        """The element inputs among `views` ([R, N]) to read across the rows: those whose rows are
        one element apart (a matrix's first axis, reduced), where no element input holds its
        elements one apart (one broadcast over rows and elements, stride 0, holds neither): their
        indices, else ()."""
        elements = [(i, v) for i, (v, role) in enumerate(zip(views, self.roles)) if role == "element"]
        if any(hint(v.stride(1)) == 1 for _, v in elements):
            return ()
        return tuple(i for i, v in elements if hint(v.stride(0)) == 1)

    def _launch(self, views, pointers, scalars, rows, n, config, sums=(), stores=None):
        block, per_program = config[self.block], config["ROWS"]
        blocks = cdiv(rows, per_program)
        # (traced: unless runtime.sizes.known says every row fits). A config's LOOP passes over a
        # row its block holds as over a longer one: a trip a pass, each loading the row again.
        looped = bool(config.get("LOOP")) or not known(n <= block)
        head = ()
        math_64 = float64_math(self.name, self.compute == tl.float64, views)
        check_float_range(self.name, self.scalars, scalars, math_64, _MATH_DTYPE_RULE)
        constexprs = {"INDEX_64": needs_int64(*views, extra=block * per_program), "MATH_64": math_64}
        # Rows held whole load each block a trip ahead where the grid is a few programs a
        # multiprocessor, each taking many blocks: PER_SM asks for it, and so do the column sums.
        sms = device_facts(views[0].device)[0]
        per_sm = 0 if looped else config.get("PER_SM", 0)
        if per_sm:
            blocks = smaller(blocks, per_sm * sms)
        if stores is not None:
            constexprs["STORES"] = stores
        if self.sums_columns and not sums:
            # A kernel that sums columns, asked for no column sum: no workspace, no finish.
            head = (None, None)
            constexprs.update({"SHARED_FINISH": False, "COLS": 1, "COL_ROWS": 1})
        if sums:
            # On a GPU at most one program a multiprocessor, all resident at once, so that all can
            # wait for each other and then share the finish. Elsewhere (the interpreter runs
            # programs one at a time; see grid_wait_allowed) a few a multiprocessor, and the last
            # to arrive finishes alone. Rows held whole: each program sums its rows' columns into
            # a workspace row, and the finish adds those up. Long rows: each program leaves its
            # rows' values in the workspace, and the finish sums strips of columns down every row
            # (adding each block's column sums into a workspace row as the output pass went cost
            # more than the row's other work: bench/results/h200/reductions/column_kernel).
            shared = grid_wait_allowed(views[0].device)
            blocks = smaller(blocks, sms if shared else self.SUM_PROGRAMS_PER_SM * sms)
            traced = library.traced(views)
            room = self.row_values * rows if looped else len(sums) * blocks * n
            head = split_k_workspace(views[0].device, max(1, room), 2, fresh=traced,
                                     dtype=torch.float64 if math_64 else torch.float32)
            cols, col_rows = column_sums_tile(hint(n), sms, config["num_warps"], len(sums), self.column_reads,
                                              views[0].element_size(), 8 if math_64 else 4)
            constexprs.update({"SHARED_FINISH": shared, "COLS": cols, "COL_ROWS": col_rows})
            if looped:
                constexprs["INDEX_64"] = needs_int64(*views, extra=max(block * per_program, cols * col_rows))
        strides = [s for view in views for s in view.stride()]
        constexprs.update({self.block: block, "ROWS": per_program, "ONE_TILE": not looped,
                           "AHEAD": not looped and bool(per_sm or sums),
                           "UNROLL": row_unroll(config.get("UNROLL", 0), hint(n), block, config["num_warps"], per_program),
                           "FIXED_N": fixed_row_length(config, n), "EVICT": looped and bool(config.get("EVICT", 0))})
        if self.read_back is not None:
            math = torch.float64 if math_64 else torch.float32
            constexprs["READ_BACK"] = looped and all(views[i].dtype == math for i in self.read_back)
        varying = len(head) + len(views) + len(scalars)
        return self.kernel.launch((blocks,), (*head, *pointers, *scalars, rows, n, *strides), varying, constexprs,
                                  config["num_warps"])

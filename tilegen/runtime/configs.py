"""Config choice: candidate configs per kind, the heuristics, tuned tables, and the chooser that
remembers its pick per shape bucket.

Configs name their block fields as the op's spec does (`names`), so the kernel's constexprs, the
candidates and the rendered table agree.
"""

import contextlib
import math

import torch
import triton

from .device import INTERPRET, cdiv, table_gpu
from ..schema import PER_SM_COUNTS, UNROLL_SIZES, tile_of

# Doublings (summed over the key's sizes) past which a table entry is no better a guess than the
# heuristic.
TABLE_REACH = 2.0


class ConfigChooser:
    """Picks a launch config per key and remembers it, so that a choice costs one dict lookup.

    mode "fixed": always the first candidate. "auto": the config measured best for the nearest
    shape bucket on this GPU (the op's table, from `tilegen tune`), else the space's heuristic;
    no runtime tuning. "autotune": on a GPU, time every candidate once per key with
    triton.testing.do_bench and keep the fastest; in the interpreter (which cannot time kernels)
    the heuristic's pick.

    Hooks for tools and tests: `forcing(config)`, `using_mode(mode)`, `recording()`, `reset()`,
    and `on_change`, callbacks run whenever an earlier choice stops holding (the compiled call
    path forgets the calls it learned then).
    """

    def __init__(self, mode, space, table=None, key_mask=None):
        self.mode = mode
        self.space = space
        # Key parts masked out (configs.key leaves their axis out) do not tell configs apart.
        self.key_mask = key_mask if key_mask is not None and not all(key_mask) else None
        self.table = table or {}
        self.cache = {}
        self.on_change = []
        self._forced = None
        self._records = []

    @property
    def forced(self):
        """The config `forcing` launches with, or None."""
        return self._forced

    def candidates(self, facts, key, explore=False):
        """Every config this op may launch for `key` (tests run each one). explore=True (tuning)
        also varies what the spec leaves open besides the tiles (warps, pipeline stages)."""
        return self.space.candidates(facts, key, explore=explore)

    def reset(self):
        """Forget every choice made so far, and tell the listeners."""
        self.cache.clear()
        for callback in self.on_change:
            callback()


    @contextlib.contextmanager
    def forcing(self, config):
        """Launch with `config` inside the block, whatever the mode would pick (a broadcast
        elementwise call as it launches any config: ElementwiseOp._for_broadcast)."""
        self._forced = config
        self.reset()
        try:
            yield
        finally:
            self._forced = None
            self.reset()

    @contextlib.contextmanager
    def using_mode(self, mode):
        """Choose in `mode` ("auto", "autotune", "fixed") inside the block."""
        old, self.mode = self.mode, mode
        self.reset()
        try:
            yield
        finally:
            self.mode = old
            self.reset()

    @contextlib.contextmanager
    def recording(self):
        """Yield a list that collects (key, config) for each choice made inside the block. Calls
        served without a choice (the compiled call path's) are forgotten on the way in."""
        chosen = []
        self._records.append(chosen)
        self.reset()
        try:
            yield chosen
        finally:
            self._records.remove(chosen)

    def choose(self, key, facts, launch, traced=False):
        """The config for `key`; `launch(config)` runs one launch (autotune times it; None where
        nothing can be timed, as while tracing: then the table or the heuristic decides).
        A `traced` launch (torch.compile, export) reads the table as traced_entries says."""
        if self._forced is not None:
            config = self._forced
        else:
            cache_key = key
            if self.key_mask is not None:
                # The mask covers the sizes and the element size; a batch count (a batched
                # matmul's key, before the element size) always tells configs apart.
                keep = self.key_mask[:-1] + (True,) * (len(key) - len(self.key_mask) + 1)
                cache_key = tuple(part if kept else None for part, kept in zip(key, keep))
            if traced:
                cache_key = (cache_key, "traced")
            config = self.cache.get(cache_key)
            if config is None:
                config = self.cache[cache_key] = self._pick(key, facts, launch, traced)
        for chosen in self._records:
            chosen.append((key, config))
        return config

    def _pick(self, key, facts, launch, traced=False):
        fitting = self.candidates(facts, key)
        if not fitting:
            raise ValueError(f"no launch config fits key {key}")
        if self.mode == "autotune" and not INTERPRET and launch is not None:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError(f"autotuning key {key} would time kernels inside a CUDA graph capture; "
                                   "call the op once with these shapes before capturing")
            timings = [(triton.testing.do_bench(lambda: launch(c), warmup=5, rep=20), i, c)
                       for i, c in enumerate(fitting)]
            return min(timings)[2]
        if self.mode == "fixed":
            return fitting[0]
        gpu = table_gpu(facts[2])
        entries = self.table.get(gpu, {})
        if traced:
            entries = traced_entries(entries, self.table.get(traced_section(gpu), {}))
        # A table entry may hold a tile only tuning tries (several rows a program): it stands if
        # it is among the explored candidates, every one of which launches.
        tuned = nearest_entry(entries, key, self.candidates(facts, key, explore=True)) if entries else None
        return tuned if tuned is not None else self.space.heuristic(fitting, facts, key)


def traced_section(gpu):
    """The table section holding `gpu`'s pointer-load twins of its descriptor entries (see
    traced_entries), which `tilegen tune` writes beside them."""
    return f"{gpu} traced"


def through_descriptors(config) -> bool:
    """Whether `config` loads through tensor descriptors (TMA; its TMA_STORE takes effect only
    with them, MatmulOp._launch): a launch a traced call cannot make."""
    return bool(config.get("TMA"))


def traced_entries(entries, twins):
    """The entries a traced launch (torch.compile, export) reads. Such a launch loads through
    pointers: PyTorch records a Triton kernel's call outside Dynamo without capturing tensor
    descriptors, and the data it will see is not at hand. An entry measured with descriptor loads
    (TMA) can be a poor pointer launch (bmm's 128x128 tiles at 32x2048x2048x128 on the H200: 98 us
    through descriptors, 208 through pointers), so it gives way to its twin, the fastest launch
    through pointers that the same tune timed (`twins`, the table's traced_section), or where
    there is none it is left out: the nearest other entry, or the heuristic, decides."""
    return {key: twins[key] if through_descriptors(config) else config
            for key, config in entries.items() if not through_descriptors(config) or key in twins}


def nearest_entry(entries, key, fitting):
    """The table entry nearest `key` (same element size; log2 distance over sizes) that is a candidate.

    Keys end with the element size; entries whose tiles are not among `fitting` (a masks: never
    axis, a smaller candidate list) are passed over, and so are entries more than TABLE_REACH
    doublings away in total, and those of another form (a batched matmul's keys hold a batch
    count: they and plain matmuls' keys never stand in for each other).
    """
    tiles = [tile_of(c) for c in fitting]
    ranked = sorted(
        (sum(abs(math.log2(max(a, 1)) - math.log2(max(b, 1))) for a, b in zip(entry_key[:-1], key[:-1])), i)
        for i, entry_key in enumerate(entries) if entry_key[-1] == key[-1] and len(entry_key) == len(key)
    )
    configs = list(entries.values())
    for distance, i in ranked:
        if distance > TABLE_REACH:
            break
        config = configs[i]
        if tile_of(config) in tiles:
            return config
    return None


def lighter_forms(config):
    """Forms of a matmul `config` that need less shared memory, lightest last: fewer pipeline
    stages, then the outputs stored through pointers instead of a shared-memory staging tile
    (TMA_STORE off) at each depth. A config chosen for a kernel may not fit the shared memory of
    a variant that does more in its epilogue (a training call also stores the float32
    accumulator), which only compiling the variant tells."""
    stages = config["num_stages"]
    forms = [dict(config, num_stages=s) for s in range(stages - 1, 0, -1)]
    if config.get("TMA_STORE"):
        forms += [dict(config, TMA_STORE=0, num_stages=s) for s in range(stages, 0, -1)]
    return forms


def default_warps(block):
    # 8 to 16 elements per thread: enough bytes in flight per load, few enough registers.
    return max(1, min(8, block // 256))


# The bytes of streamed tensors (read or written whole, not broadcast) a thread of a strided
# elementwise call keeps in flight a block, at least: three 16-byte vectors, what the tables'
# half-precision configs (tuned on same-shape calls) move a thread at 103-108% of a copy's speed.
MIN_STREAMED_BYTES = 48


def block_for_streams(block, offered, threads, streamed_bytes):
    """The block a call launches whose tensors not broadcast take `streamed_bytes` an element
    (each one's element size, summed) where its config says `block` (a table's entry, measured on
    calls that stream every tensor): doubled while a thread of `threads` moves fewer than
    MIN_STREAMED_BYTES a block and the op offers the double (`offered`). A row [N] broadcast
    over x [rows, N] is read from cache, and the table's block left half-precision threads 32
    bytes. On the H200, scaled_silu_mul with b such a row, at 2^26 and 2^28 elements: the table's
    1024 elements, 4 warps, at 88-93% of a copy's speed, 2048 at 98-101%; in float32 the table's
    block (64 bytes a thread) at 97-100%, doubled at 94-98% (bench/results/h200/broadcast/lines/)."""
    while block * streamed_bytes < MIN_STREAMED_BYTES * threads and block * 2 in offered:
        block *= 2
    return block


class ElementwiseSpace:
    """Candidate configs for a 1-D tiled op: each block size with its warp counts. The key is
    (size or its bucket, element size). `exact` (masks: never) keeps only blocks that divide
    the size, which the key then holds exactly."""

    def __init__(self, block, blocks, warps, exact):
        self.block, self.blocks, self.warps, self.exact = block, list(blocks), list(warps), exact
        self.names = (block,)  # the spec's names for the kind's block fields

    def candidates(self, facts, key, explore=False):
        def warp_options(b):
            if self.warps:
                return self.warps
            w = default_warps(b)
            return sorted({max(1, w // 2), w, min(16, w * 2)}) if explore else [w]
        return [{self.block: b, "num_warps": w} for b in self.blocks if not self.exact or key[0] % b == 0
                for w in warp_options(b)]

    def heuristic(self, fitting, facts, key):
        """The largest block that still gives every multiprocessor a few programs to run."""
        sms, numel = facts[0], key[0]
        ordered = sorted(fitting, key=lambda c: (c[self.block], c["num_warps"]))
        for config in reversed(ordered):
            if cdiv(numel, config[self.block]) >= 4 * sms:
                return config
        return ordered[0]


# The longest row a reduction loads into one tile; longer rows loop over block-sized steps. A
# backward keeps more values of the row live at once (inputs, incoming gradients, the forward's
# values it recomputes): it loads whole rows up to a shorter length, past which they spill.
MAX_ROW_TILE = 32768
MAX_BACKWARD_ROW_TILE = 8192
_ROWS_PER_PROGRAM = (1, 2, 4, 8, 16, 32, 64)
# The largest tile (rows by block) of a looped row's step that tuning tries, as for several
# rows held whole (ReductionSpace._rows_options).
MAX_LOOPED_TILE = 16384
# A backward's looped row goes in blocks of at most this many: it keeps more of each block live
# than a forward. On the H200 at 4096x32768 (bench/results/h200/reductions/column_kernel), the
# backward's row kernel in blocks of 4096 against 8192: layer_norm float32 650 against 872 us;
# with the grid at one program a multiprocessor, layer_norm float16 344 against 363, rms_norm 300
# against 305, add_rms_norm 493 against 471 (its table holds its own).
MAX_BACKWARD_LOOP_BLOCK = 4096
# A long row's column phase loads at most this many elements of each input a thread a step
# (column_sums_tile).
COLUMN_ELEMENTS_PER_THREAD = 32
# A forward's rows this long and longer: tuning also tries passing over a row its block holds
# (ReductionSpace._loop_options).
LOOP_ROWS_FROM = 8192

# A looped row goes UNROLL blocks a loop trip, a tl.static_range each, so that a trip's loads
# are issued together (Triton pipelines no loop along a row). A config's UNROLL of 0 leaves it to
# the rule: the row's blocks, at most MAX_UNROLL (more would only lengthen the compile) and at
# most MAX_TRIP_ELEMENTS a thread a trip. 4-15% faster than one block a trip on half-precision
# rows of 32768, but not for every warp count and dtype (bench/probes/reduction_pipelining.txt:
# layer_norm float32 in 8192 blocks with 16 warps lost 4%): tuning also tries the other counts.
MAX_UNROLL = 8
# The most elements a thread loads in one trip that were measured (64, in 4096 blocks with 16
# warps, 8 a trip); past them, registers would run out (a whole 32768 row spills at 32-64 a
# thread where it keeps more values live: bench/probes/reduction_configs.txt).
MAX_TRIP_ELEMENTS = 64


def row_unroll(unroll, n, block, warps, rows=1):
    """Blocks a loop trip for rows of `n` in `block`-sized blocks, `rows` rows a step, with `warps`
    warps, as a config's UNROLL asks (0: the rule above); never more than the row has (1 for a row
    held whole)."""
    if not unroll:
        unroll = max(1, min(MAX_UNROLL, MAX_TRIP_ELEMENTS * 32 * warps // (block * rows)))
    return max(1, min(unroll, cdiv(n, block)))


def fixed_row_length(config, n):
    """The row length a reduction kernel compiles in as a constant (its FIXED_N), or 0 where it
    reads it at run time. A config's FIXED_N asks for it: the loops along the row then have known
    trip counts and whole blocks' masks fold away, as in TorchInductor's kernels (a kernel per
    length, so tuning tries it and tables say where it measured faster). It applies where `n` is a
    power of two, its table key's own length, so that an entry compiles one kernel, not one per
    length in its bucket; a length traced as a symbol (dynamic shapes) stays a run-time value."""
    if not config.get("FIXED_N") or type(n) is not int or n < 1 or n & (n - 1):
        return 0
    return n


def reduction_warps(elements):
    # About 16 elements of the tile per thread for short tiles, up to 64 for the longest rows.
    return max(1, min(16, elements // 512))


# Rows one element apart (`dim=` reducing a matrix's first axis: the reduced axis strided): a
# tile of ACROSS_ROWS rows by at most ACROSS_BLOCK elements of each, so that each load reads
# a line of consecutive rows (Triton coalesces along the tile's contiguous axis), where the
# configs for rows laid out along the reduced axis read a sector an element. 16 by 256 on 8
# warps was the best of the tiles tried on the H200 (geomean 1.05x the best per case over
# softmax and layer_norm at 8192x4096 and 1024x16384; 32 by 128 on 4 warps 1.43x):
# bench/results/h200/reductions/reduced_axis/.
ACROSS_ROWS = 16
ACROSS_BLOCK = 256
ACROSS_WARPS = 8


def across_rows_config(block, n):
    """The config of a reduction whose rows are one element apart: ACROSS_ROWS rows a step, in
    blocks of at most ACROSS_BLOCK along them (the whole row where it is shorter)."""
    whole = max(16, 1 << (max(n, 1) - 1).bit_length())
    return {block: min(whole, ACROSS_BLOCK), "ROWS": ACROSS_ROWS, "num_warps": ACROSS_WARPS, "UNROLL": 0}


def column_sums_tile(n, sms, warps, sums=1, reads=2, itemsize=2, compute_size=4):
    """(columns a strip, rows a step) of a backward's column phase over long rows, where each
    program (one a multiprocessor) sums whole strips of columns down every row, `sums` column
    sums from `reads` inputs of `itemsize` bytes, in math of `compute_size` bytes: the widest strip
    of 32 to 128 columns that still gives every multiprocessor a strip, and as many elements of
    each input a thread a step, up to COLUMN_ELEMENTS_PER_THREAD, as its registers hold. Each step
    issues the next step's loads before its own math, so a thread holds, per element, each sum's
    lane, each input's value in the math's dtype and its next one in its own.

    On the H200 at 4096x32768 with 16 warps (128 registers a thread; bench/results/h200/reductions/
    column_prefetch/): rms_norm half (one sum: 32 elements fit) 430 us of backward against 478
    before the loads went a step ahead; layer_norm (two sums: 16 elements) float32 1001 against
    1036, half 532 against 523 (at 32 elements, with the loads ahead, it spilled: 621 and 1222)."""
    cols = next((c for c in (128, 64) if cdiv(n, c) >= sms), 32)
    registers = min(255, 65536 // (32 * warps))
    per_element = (sums * compute_size + reads * (compute_size + itemsize)) / 4
    elements = COLUMN_ELEMENTS_PER_THREAD
    while elements > 8 and elements * per_element > registers:
        elements //= 2
    return cols, max(1, elements * 32 * warps // cols)


class ReductionSpace:
    """Candidate configs for a reduction: a tile holding whole rows (its block the row length's
    next power of two, up to `max_tile`) with some rows per program, or, for a row longer than a
    block, each of the spec's blocks looping along one row. The key is (N's bucket, the row
    count's bucket, element size). A backward (`backward`) holds rows whole up to a shorter length.

    Whether a long row runs faster whole or looping depends on the op and dtype (at 4096x32768 on
    the H200, bench/probes/reduction_configs.txt: layer_norm's whole row spills, 408 us in half
    precision against 173 looping in 8192-element blocks; softmax in float32 runs whole in 342 us
    against 394): the heuristic holds rows whole where a tile can, and the ops' own tables, from
    `tilegen tune`, say where looping wins.

    Rows held whole launch a program a row block, or (PER_SM, which tuning tries) a few programs a
    multiprocessor, each taking row blocks a grid apart and issuing the next block's loads before
    this block's math. Where registers leave room for a single program a multiprocessor (a half
    row of 32768 in 16 warps), nothing else hides a block's loads behind another's math: softmax
    at 4096x32768 on the H200 took 264 us a program a row block, 147 us with PER_SM 1, against
    171 looping (bench/results/h200/reductions/per_sm/); and a weight is loaded once a program."""

    def __init__(self, block, blocks, warps, rows=(), backward=False, unroll=(), per_sm=(), fixed_n=(), evict=(),
                 loop=()):
        self.block, self.blocks, self.warps, self.rows = block, list(blocks), list(warps), list(rows)
        self.unroll, self.per_sm, self.fixed_n, self.evict = list(unroll), list(per_sm), list(fixed_n), list(evict)
        self.loop = list(loop)
        self.max_tile = MAX_BACKWARD_ROW_TILE if backward else MAX_ROW_TILE
        self.backward = backward
        self.names = (block,)

    def _rows_options(self, whole, count, explore):
        if self.rows:
            return self.rows
        rows = self._default_rows(whole, count)
        if explore:  # (one row per program always: a row longer than 16384 has no other)
            return [r for r in _ROWS_PER_PROGRAM if rows // 4 <= r <= rows * 4 and r * whole <= max(16384, whole)]
        return sorted({1, rows})

    @staticmethod
    def _default_rows(whole, count):
        # About 4096 elements per program for short rows; never more rows than there are.
        return max(1, min(4096 // whole, 64, count))

    def _warp_options(self, elements, explore):
        if self.warps:
            return self.warps
        w = reduction_warps(elements)
        # Tuning also tries 32 warps (a whole block of threads) for the longest rows.
        return sorted({max(1, w // 2), w, min(32 if elements >= 16384 else 16, w * 2)}) if explore else [w]

    def _unroll_options(self, n, block, warps, rows, explore):
        if self.unroll:
            return self.unroll
        if not explore:
            return [0]
        ruled = row_unroll(0, n, block, warps, rows)
        return [0] + [u for u in UNROLL_SIZES if u != ruled and u == row_unroll(u, n, block, warps, rows)]

    def _per_sm_options(self, warps, explore):
        # (no more warps resident than a multiprocessor holds: 64)
        if self.per_sm:
            return self.per_sm
        return [0] + [p for p in PER_SM_COUNTS if p * warps <= 64] if explore else [0]

    def _fixed_n_options(self, n, explore):
        # The row length compiled in (fixed_row_length): tuning tries it beside every config where
        # it applies, in its second pass (tune.SECOND_PASS_FLAGS).
        if self.fixed_n:
            return self.fixed_n
        return [0, 1] if explore and fixed_row_length({"FIXED_N": 1}, n) else [0]

    def _evict_options(self, explore):
        # A looped row's cache hints (EVICT): tuning tries them beside every looped config, also in
        # its second pass.
        if self.evict:
            return self.evict
        return [0, 1] if explore else [0]

    def _loop_options(self, n, explore):
        # A row its block holds, passed over as a longer one (LOOP: a pass a stage, each loading
        # the row again, from L2 after the first; TorchInductor's float32 rms_norm at 4096x32768
        # runs so, R0_BLOCK 32768: bench/results/h200/anchors/). Tuning tries it for a forward's
        # rows of LOOP_ROWS_FROM and longer, where a row held whole fills a thread's registers.
        if self.loop:
            return self.loop
        return [0, 1] if explore and not self.backward and n >= LOOP_ROWS_FROM else [0]

    def _looped_rows_options(self, block, explore):
        # A backward that sums columns (a weight's gradient) reads and writes its workspace row's
        # block on every block of a looped row: a few rows a step share that traffic. Tuning
        # tries them there; a forward loops one row a step.
        if not (explore and self.backward):
            return [1]
        return [r for r in (1, 2, 4) if r * block <= MAX_LOOPED_TILE]

    def candidates(self, facts, key, explore=False):
        n, count = key[0], key[1]
        out = []
        whole = max(n, 16)
        loops = self._loop_options(n, explore) if whole <= self.max_tile else []
        if 0 in loops:
            for rows in self._rows_options(whole, count, explore):
                for w in self._warp_options(rows * whole, explore):
                    for p in self._per_sm_options(w, explore):
                        out.append({self.block: whole, "ROWS": rows, "num_warps": w, "UNROLL": 0,
                                    **({"PER_SM": p} if p else {})})
        if 1 in loops:
            for w in self._warp_options(whole, explore):
                for e in self._evict_options(explore):
                    out.append({self.block: whole, "ROWS": 1, "num_warps": w, "UNROLL": 0, "LOOP": 1,
                                **({"EVICT": e} if e else {})})
        for b in self.blocks:
            if b < n:
                for rows in self._looped_rows_options(b, explore):
                    for w in self._warp_options(b * 2 * rows, explore):
                        for u in self._unroll_options(n, b, w, rows, explore):
                            for e in self._evict_options(explore):
                                out.append({self.block: b, "ROWS": rows, "num_warps": w, "UNROLL": u,
                                            **({"EVICT": e} if e else {})})
        fixed = self._fixed_n_options(n, explore)
        return [{**c, **({"FIXED_N": f} if f else {})} for c in out for f in fixed]

    def heuristic(self, fitting, facts, key):
        """Whole rows where they fit a tile, with the default rows per program; else the largest
        block, looping (a backward's: up to MAX_BACKWARD_LOOP_BLOCK)."""
        n, count = key[0], key[1]
        whole = [c for c in fitting if c[self.block] >= n and not c.get("LOOP")]
        if whole:
            rows = self._default_rows(whole[0][self.block], count)
            return min(whole, key=lambda c: (abs(c["ROWS"] - rows), c["num_warps"]))
        looping = fitting
        if self.backward:
            looping = [c for c in fitting if c[self.block] <= MAX_BACKWARD_LOOP_BLOCK] or fitting
        return max(looping, key=lambda c: (c[self.block], c["num_warps"]))


# The largest output tile a full-precision float32 dot (FMA units) takes by default.
FMA_TILE_AREA = 64 * 128


class MatmulSpace:
    """Tile candidates for a matmul, pruned to those that fit the shape and shared memory.

    The key is (M, N, K, itemsize), or (M, N, K, matrices, itemsize) for a batch of matrices
    launched at once (a batched matmul whose batch does not fold into M: every matrix's tiles
    count toward filling the machine); `exact` flags the axes with masks: never, whose blocks must
    divide the size. Tiles much taller or wider than the output only waste work, and a split of
    K is only worth a second pass over partial sums where the tiles alone fill at most two waves
    and each slice still has a few K steps to pipeline. (Bucketed keys overstate a shape by up
    to 2x per axis, so the bounds are loose; the table or the heuristic chooses.)

    `launch` is the spec's schedule.launch. Under "auto", tuning also tries persistent variants
    (PERSISTENT: one program per multiprocessor, looping over the tiles) where the tiles fill
    more than one wave; "tiled" and "persistent" fix the launch style in the op instead. Where a
    launch can be persistent, tuning also tries its tile loop flattened with the K loop (FLATTEN:
    the next tile's first loads then overlap this tile's epilogue, which pays where a short K
    leaves a tile little else to hide its store behind).

    `ieee_float32`: the op's float32 dots run in full precision (`precision: ieee`), on the FMA
    units; its float32 keys then default to smaller tiles (FMA_TILE_AREA).
    """

    def __init__(self, names, bm_sizes, bn_sizes, bk_sizes, warps, stages, exact, splits=(1,), launch="auto",
                 ieee_float32=False):
        self.names = tuple(names)
        self.sizes = (list(bm_sizes), list(bn_sizes), list(bk_sizes))
        self.warps, self.stages, self.exact = list(warps), list(stages), tuple(exact)
        self.splits, self.launch = tuple(splits), launch
        self.ieee_float32 = ieee_float32

    def _warp_options(self, bm, bn, explore):
        if self.warps:
            return self.warps
        if bm * bn >= 128 * 256:
            return [8]  # fewer warps would each hold too much of the accumulator
        if explore and bm * bn >= 64 * 128:
            return [4, 8]
        return [4]

    def _stage_options(self, per_stage, shared, explore):
        if self.stages:
            return self.stages
        deepest = max(2, min(4, shared // max(per_stage, 1)))
        return sorted({3, 4, 5, deepest}) if explore else [deepest]

    def candidates(self, facts, key, explore=False):
        sms, shared = facts[0], facts[1]
        m, n, k, *batch, itemsize = key
        matrices = batch[0] if batch else 1
        bm_sizes, bn_sizes, bk_sizes = self.sizes
        exact = self.exact
        name_m, name_n, name_k = self.names
        out = []
        for bm in bm_sizes:
            if (exact[0] and m % bm) or (bm > max(64, m) and bm != min(bm_sizes)):
                continue
            for bn in bn_sizes:
                if bm * bn > 128 * 256 or (exact[1] and n % bn):  # larger fp32 accumulators spill
                    continue
                if bn > max(64, n) and bn != min(bn_sizes):
                    continue
                tiles = cdiv(m, bm) * cdiv(n, bn) * matrices
                for bk in bk_sizes:
                    if exact[2] and k % bk:
                        continue
                    per_stage = (bm * bk + bk * bn) * itemsize
                    # A split is offered where the tiles alone leave the GPU idle and K holds enough
                    # blocks; where none of the spec's factors is (`split_k: [4]` at a large shape),
                    # the tile runs whole.
                    splits = [split for split in self.splits if split == 1 or (
                        tiles < 2 * sms and tiles * split <= 4 * sms and cdiv(k, bk) >= 4 * split)] or [1]
                    for split in splits:
                        for w in self._warp_options(bm, bn, explore):
                            for s in self._stage_options(per_stage, shared, explore):
                                if per_stage * s > shared:
                                    continue
                                config = {name_m: bm, name_n: bn, name_k: bk, "SPLIT_K": split, "num_warps": w,
                                          "num_stages": s}
                                variants = [config]
                                if explore and split == 1 and tiles > sms:  # a loop over tiles to try
                                    if self.launch == "auto":
                                        variants.append(dict(config, PERSISTENT=1))
                                    if self.launch != "tiled":
                                        variants.append(dict(config, PERSISTENT=1, FLATTEN=1))
                                for variant in variants:
                                    out.append(variant)
                                    if explore:  # tensor-memory-accelerator loads, where they fit,
                                        out.append(dict(variant, TMA=1))  # and with them stores
                                        out.append(dict(variant, TMA=1, TMA_STORE=1))
        return out

    def heuristic(self, fitting, facts, key):
        """Big tiles for throughput, shrunk until the grid covers the machine; BK by element size.
        Where even the smallest tiles leave multiprocessors idle, split K until they are busy."""
        sms = facts[0]
        m, n, k, *batch, itemsize = key
        matrices = batch[0] if batch else 1
        want_bk = {1: 128, 2: 64}.get(itemsize, 32)  # 128 bytes of K a row: what a tensor-core step takes
        name_m, name_n, name_k = self.names

        def score(c):
            tiles = cdiv(m, c[name_m]) * cdiv(n, c[name_n]) * matrices
            waste = (cdiv(m, c[name_m]) * c[name_m] * cdiv(n, c[name_n]) * c[name_n]) / max(m * n, 1)
            fills = tiles >= sms
            area = c[name_m] * c[name_n]
            return (fills, -round(waste, 1), area if fills else -area, -abs(c[name_k] - want_bk), c["num_stages"],
                    -c["num_warps"])

        unsplit = [c for c in fitting if c.get("SPLIT_K", 1) == 1] or fitting
        if itemsize == 4 and self.ieee_float32:
            # A float32 dot in full precision runs on the FMA units, not the tensor cores: each
            # thread's share of the tile is its register block, and larger tiles ran slower (an
            # H100 at 16384x4096x4096: 128x256 tiles 13.1 ms, 64x128 11.8 ms; at 4096x1024x1024
            # 397 against 222 us: bench/results/h100/float32_matmul). The op's forward only: its
            # gradient's products (transposed operands) measured faster with the large tiles.
            unsplit = [c for c in unsplit if c[name_m] * c[name_n] <= FMA_TILE_AREA] or unsplit
        best = max(unsplit, key=score)
        tiles = cdiv(m, best[name_m]) * cdiv(n, best[name_n]) * matrices
        splits = [c for c in fitting if all(c[f] == best[f] for f in best if f != "SPLIT_K")
                  and tiles * c.get("SPLIT_K", 1) <= sms]
        return max(splits, key=lambda c: c.get("SPLIT_K", 1)) if splits else best

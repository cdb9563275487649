"""The names and rules that the build, tables, tuning and the runtime share: one place for each,
importable without torch (a build never needs it).

A config is a dict of launch parameters. Its block fields carry the names the spec's `tiles`
give them (`block: BM`), in the op's kernels, its candidates and its rendered table alike; the
kind-wide table files store them under the kind's canonical names below, and `rename_blocks`
translates between the two.

The rule that tells calls apart (which calls may repeat a learned launch) lives in one place too:
`append_key` in csrc/callpath.cpp, the only code that keys calls.
"""

# The interface generated code is written against (tilegen.runtime.require checks it). Raise it
# whenever a generated module built for the old one would not work with the new one, or a module
# built for the new one with the old (6: rt.Gradients takes `whole`; 7: rt.ReductionOp takes
# `row_values`, and a backward kernel that sums columns takes COLS and COL_ROWS; 8: a reduction's
# finish calls tilegen.runtime.sync.finish_share; 9: rt.ReductionOp takes `column_reads`; 10: a
# reduction kernel takes AHEAD, its whole rows' loads issued a step ahead; 11: a reduction's wrapper
# calls rt.ReductionOp.along for `dim=`; 12: a reduction kernel takes FIXED_N and EVICT; 13: a
# strided elementwise kernel takes LINES and calls tilegen.runtime.strided.strided_indices; 14: an
# elementwise or reduction backward kernel takes STORES, its op `selective=True` and runs `stores=`;
# 15: rt.Gradients takes `differentiable=`, a backward's math in PyTorch's ops over rt.in_precision;
# 16: rt.MatmulSpace takes `ieee_float32=`; 17: every kernel module imports
# tilegen.runtime.kernel_math.precise_tanh; 18: one that stores int or bool results in float
# outputs imports tilegen.runtime.kernel_math.int_as_float_output).
RUNTIME_VERSION = 18

# Each kind's config fields, block fields first, under their canonical (table file) names.
BLOCK_FIELDS = {"matmul": ("BM", "BN", "BK"), "elementwise": ("BLOCK",), "reduction": ("BLOCK",)}
CONFIG_FIELDS = {"matmul": ("BM", "BN", "BK", "SPLIT_K", "num_warps", "num_stages", "TMA", "PERSISTENT",
                            "FLATTEN", "TMA_STORE"),
                 "elementwise": ("BLOCK", "num_warps"), "reduction": ("BLOCK", "ROWS", "num_warps", "UNROLL", "PER_SM", "FIXED_N",
                               "EVICT", "LOOP")}
# Fields that say how a tile is computed, not which: an entry applies to an op whose candidates
# hold its other fields, whatever these say.
SCHEDULE_FIELDS = ("num_warps", "num_stages", "TMA", "PERSISTENT", "FLATTEN", "TMA_STORE", "UNROLL", "PER_SM",
                   "FIXED_N", "EVICT", "LOOP")
# On/off fields of a config (1: on), named by themselves where a config is shown.
FLAG_FIELDS = ("TMA", "PERSISTENT", "FLATTEN", "TMA_STORE", "FIXED_N", "EVICT", "LOOP")
# Fields that entries written before the field existed leave out, with the value they meant.
FIELD_DEFAULTS = {"SPLIT_K": 1, "TMA": 0, "PERSISTENT": 0, "FLATTEN": 0, "TMA_STORE": 0, "UNROLL": 0, "PER_SM": 0,
                  "FIXED_N": 0, "EVICT": 0, "LOOP": 0}
# A reduction's UNROLL (blocks a loop trip along a row) where a config names it; 0 leaves it to
# the launch (tilegen.runtime.configs.row_unroll).
UNROLL_SIZES = (1, 2, 4, 8)
# A reduction's PER_SM where a config names it: programs a multiprocessor, each taking row blocks
# a grid apart with the next block's loads issued during this one's math (rows held whole); 0, the
# default, launches a program a row block.
PER_SM_COUNTS = (1, 2, 4)


def store_bit(index):
    """The bit of a selective backward kernel's STORES that asks it for its `index`-th output (a
    gradient): the kernel stores, and sums the columns of, only the outputs whose bits are set."""
    return 1 << index


def rename_blocks(config, source, target):
    """`config` with its block fields renamed from the names `source` to `target` (in order)."""
    names = dict(zip(source, target))
    return {names.get(field, field): value for field, value in config.items()}


def bucket(size):
    """The shape bucket of a size: the next power of two. Shapes that share a bucket share a
    table entry and a chosen config."""
    return 1 if size <= 1 else 1 << (size - 1).bit_length()


def tile_of(config):
    """What decides whether a table entry applies to an op: its config less the schedule fields."""
    return tuple((k, v) for k, v in sorted(config.items()) if k not in SCHEDULE_FIELDS)

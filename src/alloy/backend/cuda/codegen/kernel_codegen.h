// CUDA C++ source generated from a KernelAnalysis, for one variant of launch-time choices
// (collapsed ranks, vector width, block size, registers per thread). Pure text: no GPU needed, so
// `alloy compile --arch` and CI exercise it through NVRTC.
#pragma once

#include <string>
#include <vector>

#include "alloy/segment/schedulers/kernel_analysis.h"

namespace alloy::cuda {

struct KernelVariant {
  int outer_rank = 1;  // pointwise: the collapsed domain rank; row kernels: collapsed kept axes
  int inner_rank = 0;  // row kernels: collapsed reduced axes (>= 1); pointwise: 0
  int vector = 1;      // elements per access along the innermost axis
  int threads = 256;   // block size
  int items = 0;       // row kernels: vectors per thread held in registers; 0 = re-read each pass
  int rows_per_block = 0;  // row kernels: 0 = a block per row; N = one warp per row, N warps a block
  // Row kernels holding the row in registers whose rows are exactly `items` vectors a lane: no
  // bounds checks.
  bool full_rows = false;
  int min_blocks = 0;      // row kernels: blocks an SM must fit (__launch_bounds__'s second argument); 0 = no cap
  // Column kernels (single-pass reductions over outer axes): tile_x > 0 threads of a block run
  // along the kept axes (`vector` elements each) and threads / tile_x along the reduced axes,
  // which gridDim.y further splits; partial results meet in a workspace and the last block of
  // each column tile combines them. ty_fast: consecutive threads take consecutive reduced indices
  // (for few long rows whose reduced axis is the contiguous one). 0 = a row kernel.
  int tile_x = 0;
  bool ty_fast = false;
  // Grid reductions (grid_reduction_kernel.cpp): single-pass reductions of a few long rows whose
  // reduced axis is contiguous (a sum of squares of 10^8 elements to one value, [4, 25M] over its
  // last axis). gridDim.y = the rows, gridDim.x = the blocks a row is split over: each block reduces
  // a contiguous stretch of the row's vectors into a partial (f32 for 16-bit inputs), and the last
  // block of the row to arrive combines every partial of the row in a fixed order, so the bits do
  // not depend on which block finished last. min_blocks is __launch_bounds__' blocks an SM.
  bool grid = false;
  // Inner-outer kernels (SchedulerKind::inner_outer, inner_outer_kernel.cpp): a row kernel of a
  // block per row over a persistent grid (row = blockIdx.x, + gridDim.x, ...; min_blocks the
  // blocks an SM the grid counts) whose threads also accumulate the outer reductions of the columns
  // they own (`items` vectors a thread, always held) over their rows; the blocks' partials are
  // combined at the end by the last blocks to arrive, in a fixed order.
  bool inner_outer = false;
  // Inner-outer kernels (KernelTuning::inner_outer_prefetch, inner_outer_rows_ahead): the rows a
  // block has loaded ahead of the one it reduces (0: none). Each iteration loads the row `prefetch`
  // rows ahead (its held leaves into another set of registers, its per-row leaves) before the
  // row's reductions, so loads are in flight while the block reduces and stores; the leaves that
  // vary only along the columns (a norm's weight) are loaded once, before the row loop; and a
  // stage's sums share one block reduction (one barrier).
  int prefetch = 0;
  // Inner-outer kernels: the levels of the tree that combines the blocks' column partials
  // (KernelTuning::inner_outer_combine_levels; inner_outer_tree), or 0: every block combines a
  // share of the columns past a barrier of the grid (a cooperative launch; LaunchPlan::cooperative).
  int combine_levels = 2;
  // Inner-outer kernels (KernelTuning::inner_outer_row_groups): the rows a block reduces at once,
  // each by its own group of `threads` threads (the block is threads * row_groups), the group's
  // reductions past a named barrier of the group (so a group waiting there leaves the SM to the
  // others), its column partials summed with the other groups' in shared memory (in group order)
  // after the rows; the grid then has row_groups times fewer blocks to combine.
  int row_groups = 1;
  // Inner-outer kernels (KernelTuning::inner_outer_staged_rows): the `prefetch` rows ahead come
  // through shared memory, not registers: each thread copies its own vectors of the row `prefetch`
  // ahead into a ring of prefetch + 1 row slots (cp.async on sm_80 and later, a group a row) and
  // reads the current row's out of its slot; only the per-row leaves (a norm's mean and rstd)
  // are held in registers ahead. The registers a row ahead took go to more blocks an SM.
  bool staged_rows = false;
  // Inner-outer kernels whose rows are too wide for a thread's column partials beside its row in
  // registers (the layer norm backward over 12288 or more bf16 columns): the partials live in
  // dynamic shared memory instead, [it][e][thread of the block] (consecutive threads, consecutive
  // words), inner_outer_shared_partial_bytes of it; one row group.
  bool shared_partials = false;
  // Row kernels of a block per row over rows too long for its registers (KernelTuning::
  // row_shared_bytes): the row's held leaves (L<k>[it]) live in dynamic shared memory instead,
  // [it][thread of the block] vectors, each thread's own (no barrier: only it reads them), so the
  // row is read from memory once; row_shared_bytes() of it. No values held (exp recomputed).
  bool shared_row = false;
  // Grid reductions of var_mean (KernelTuning::grid_welford_steps): the steps (U vectors a thread
  // each) a thread sums its deviations from one running mean before it merges them into its
  // running (count, mean, squared deviations): 1 merges every step (a merge's divisions and its
  // dependence between steps every U * vector elements).
  int welford_steps = 1;
  // Grid reductions (KernelTuning::grid_loads_ahead): each step loads the next step's vectors into
  // a second set of registers before it computes its own, so a thread has loads in flight while
  // it computes (the step's loads otherwise wait for the previous step's arithmetic). Not with
  // welford_steps > 1.
  bool loads_ahead = false;
  // Grid reductions (KernelTuning::grid_step_bytes): the bytes of vectors a thread loads in one
  // step before it uses any (four 16-byte vectors at 64; eight at 128).
  int step_bytes = 64;
  // Offsets fit in 32 bits (every tensor spans under 2^30 elements): int index arithmetic, fewer
  // registers than 64-bit.
  bool index32 = false;
  // Row kernels: recompute costly values (exp, tanh, ...) in later passes instead of holding them
  // in registers (fewer registers, more arithmetic; KernelTuning::recompute_values).
  bool recompute = false;
  // Loads issued before a wait instead of after it (ALLOY_NO_EARLY_LOADS=1 turns it off):
  // - row kernels holding the row in registers (items > 0): the leaves only the final pass reads
  //   (a layer norm's weight and bias) load with the row, before its reductions, within a
  //   register budget;
  // - tile transposes: the leaves not staged load with the staged tiles, before the barrier.
  bool early_loads = false;
  // Per leaf, how it is read along the innermost axis when vector > 1: 'v' a vector access
  // (stride 1), 'b' one value for the whole vector (stride 0), 'u' element by element (stride 1,
  // out of step with the aligned vectors of edge_elements).
  std::string leaf_modes;
  // Pointwise kernels and row kernels of one reduced axis whose lines (along the innermost axis)
  // are not a whole number of aligned vectors (a width or total that `vector` does not divide, rows
  // that start off a vector boundary): each line's vectors start at its first aligned element, the
  // same for every tensor read or written in vectors; the elements before it (fewer than `vector`)
  // and after the last whole vector are computed one at a time (by the first threads; in pointwise
  // kernels of several axes, by the slots a line has past its vectors).
  bool edge_elements = false;
  // Row kernels of a block per row whose stages are a max, then a sum of exp(x - that max)
  // (log-sum-exp; online_softmax_stages finds them), with nothing held in registers (items = 0):
  // one pass over the row for both, each thread keeping a running max and the sum of exp against
  // it, rescaled once per vector when the max grows; the block then takes the row's max and the
  // sum of each thread's sum rescaled to it, as online softmax does. One read of the row and few registers, so several blocks share an SM and one
  // block's loads overlap another's reductions (a row held in registers takes an SM to itself).
  bool streaming_online = false;
  // Per cat leaf (KernelAnalysis::cat_leaves, in leaf order): the axis of the collapsed domain
  // (outer axes, then inner) its concatenated axis runs along, or -1 where it has none (extent 1).
  // That axis is never merged with its neighbours, so the position along it selects the source.
  std::vector<int> cat_axes;
  // Pointwise tile transposes: the collapsed axis (not the innermost) along which the leaves marked
  // 't' in `staged` (one character per leaf, '.' for the others) are contiguous. Each block takes
  // kTransposeTile x kTransposeTile tiles of (this axis, the innermost axis): it reads each staged
  // leaf's tile along this axis into shared memory, then computes along the innermost axis, which
  // every output and the other leaves walk, so reads and writes are both coalesced (and vectors of
  // `vector` elements along each one's own contiguous axis). -1: a plain pointwise kernel.
  int transpose_axis = -1;
  std::string staged;
  std::string key() const;
  bool operator==(const KernelVariant&) const = default;
};

// The kernel is `extern "C" __global__ void <name>(Params p)`; Params is a struct of 8-byte
// words laid out as kernel_param_layout describes.
std::string generate_kernel(const KernelAnalysis& analysis, const KernelVariant& variant, const std::string& name);

// Words of the Params struct, in order (every field is 8 bytes):
//   pointwise:  numel, size[outer_rank]
//   row kernel: rows, cols, count (double: elements reduced per row), size[outer_rank + inner_rank]
//               (column kernels, grid reductions and inner-outer kernels add: workspace pointer,
//               counters pointer, after count)
//   then for each leaf, then each output: pointer, stride[outer_rank + inner_rank]
//     (a cat leaf of n sources: that for each source, its pointer moved back by the source's start
//     along the cat's axis, then the n - 1 positions where sources 0..n-2 end along that axis;
//     a position leaf: its first element's value instead of a pointer)
//     and between them, for each gather: its source's pointer and strides over the domain (0 along
//     the gathered axis), its positions in the index (first position, strides), then the source's
//     stride and size along the gathered axis
//   then each scalar input: value (double, or int64 for integer scalars)
//   then, where there are gathers, the error flag's pointer: four words, set once by the first
//     out-of-range index (1, the gather, the index value, its position in the index)
int param_words(const KernelAnalysis& analysis, const KernelVariant& variant);

// Multi-tensor kernels (segment/schedulers/multi_tensor.h): the pointwise kernel of one chain
// (`analysis`, a member's; `variant`: one axis, its vector and block) over a table of `members`
// tensors, `extern "C" __global__ void <name>(const __grid_constant__ MultiParams mp)`. Its words:
//   tensors (entries in use), chunks (of all of them), each scalar input every member shares (as in
//   Params; `per_member[k]` false), then the first chunk of each entry, then each entry: element
//   count, vector (1: every pointer of the tensor is aligned to a vector), the pointer of each leaf,
//   then of each output, then the member's own value of each scalar input with `per_member[k]`.
// A chunk is `variant.items` vectors a thread of the block; a member's scalars are read with its
// entry, once a chunk.
std::string generate_multi_tensor_kernel(const KernelAnalysis& analysis, const std::vector<bool>& per_member, const KernelVariant& variant,
                                         int members, const std::string& name);
int multi_tensor_param_words(const KernelAnalysis& analysis, const std::vector<bool>& per_member, int members);

// Online softmax in a row kernel: stage k is one max of an f32 value, stage k + 1 one sum of
// exp(sub(y, m)), m that max (through views read by nothing else), the difference read only
// there. Each such k, with the views from m to the sub's operand (last first), the exp's value,
// and whether anything else reads m (log-sum-exp adds it back).
struct OnlineSoftmaxStage {
  int stage = -1;
  bool max_read_elsewhere = false;
  std::vector<const Value*> chain;
  const Value* exp_value = nullptr;
};
std::vector<OnlineSoftmaxStage> online_softmax_stages(const KernelAnalysis& analysis);

// Column kernels: the static shared memory the block-level combine needs, and the 8-byte words
// of workspace one split needs per kept element (one per sum/max/min, three per var_mean; a grid
// reduction's partial of a block takes as many).
// Above kMaxColumnSharedBytes a reduction runs as a row kernel instead.
int column_shared_bytes(const KernelAnalysis& analysis, const KernelVariant& variant);
constexpr int kMaxColumnSharedBytes = 40 * 1024;
int column_workspace_words(const KernelAnalysis& analysis);

// Inner-outer kernels: the B blocks' column partials are combined by a tree of L levels
// (KernelVariant::combine_levels) whose nodes have S children (S the least with S^L >= B): the
// last child of a node to arrive sums its children's partials in order into the node's, so the
// combines of the first nodes to fill overlap the other blocks' rows, and the last block to finish
// its rows reads L * S partials, not B (two levels: groups of S consecutive blocks, then the
// groups). The kernel computes S and the tree the same way. Workspace: a row of partials of every
// column for each block and each node below the root, for each outer reduction (f64 ones first,
// so every region stays aligned to its vectors); counters: one a node. With L = 0 (the combine over
// the grid): a row a block, two counters (the grid barrier's).
struct InnerOuterTree {
  int64_t fanout = 1;    // S
  int64_t rows = 0;      // the blocks' and the nodes' partials below the root (0 for one block)
  int64_t counters = 0;  // the nodes', the root's included
};
InnerOuterTree inner_outer_tree(int64_t blocks, int levels);
// The dynamic shared memory of an inner-outer kernel's partials (KernelVariant::shared_partials;
// 0 without).
size_t inner_outer_shared_partial_bytes(const KernelAnalysis& a, const KernelVariant& v);
// Row kernels (KernelVariant::shared_row): the dynamic shared memory of the held leaves (those
// more than one pass reads), items * threads vectors of each; 0 without.
size_t row_shared_bytes(const KernelAnalysis& a, const KernelVariant& v);
size_t inner_outer_workspace_bytes(const KernelAnalysis& analysis, int64_t blocks, int64_t cols, int levels);
// A leaf that varies along none of the kept axes, only along the reduced ones (a norm's weight):
// the same in every row, so an inner-outer kernel loading rows ahead (KernelVariant::prefetch)
// loads it once.
bool along_columns_only(const KernelAnalysis& analysis, const Value* leaf);

// Tile transposes: the tile's side in elements, and the static shared memory its staged leaves
// take (a tile each, in the leaf's storage type). Above kMaxColumnSharedBytes the launch plan
// runs a plain pointwise kernel instead.
constexpr int kTransposeTile = 64;
int transpose_shared_bytes(const KernelAnalysis& analysis, const KernelVariant& variant);

}  // namespace alloy::cuda

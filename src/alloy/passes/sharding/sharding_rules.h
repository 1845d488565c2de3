// What each op family does with shardings. For every op, how its inputs' axes relate to its
// output's axes (an input axis maps to an output axis, is contracted, is reduced, is stretched
// from size 1, or blocks sharding); from that, which output shardings the op can compute on each
// device's part alone, what each asks of the inputs, and what the reshards it needs cost.
// passes/propagate_sharding picks with it; passes/insert_resharding asks it what an op needs.
//
// The cost rule (where two choices are possible): the choice whose reshards move fewer bytes
// wins. Bytes are global element counts times the dtype size, at the sizes the caller passes
// (`sizes`: a run's bound sizes, so the executor decides per binding; a symbol not bound counts
// as kSymbolGuess, 4096, which is what `alloy compile` without --bind assumes). An all-gather
// counts the value's bytes, an all-to-all 1/N of them, an all-reduce twice them, a
// reduce-scatter once, and taking a replicated value's part nothing. A choice that leaves its
// output partial also counts the output's bytes, for the reduction still to come, except where
// the output is annotated: there the reshard into the annotation is that reduction, counted once.
// Ties go to the candidate met first: sharded axes of the first input first, replicated last.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy::sharding_rules {

struct AxisRole {
  enum class Kind {
    maps,        // the input axis is output axis `out_axis`: shard one, shard the other
    contracted,  // summed over with another input's axis (linear, matmul): sharded -> partial sum
    reduced,     // reduced away (sum, max, min, mean): sharded -> partial
    stretched,   // size 1, broadcast to output axis `out_axis`: stays whole
    blocked,     // the op needs the whole axis (slice, cat, an inner axis of a merged reshape,
                 // var_mean); with `out_axis`, that output axis cannot be sharded either
  } kind = Kind::blocked;
  int out_axis = -1;                          // maps, stretched, and blocked where it has one
  PartialReduce reduce = PartialReduce::sum;  // contracted, reduced
};

struct OpAxes {
  std::vector<std::vector<AxisRole>> inputs;  // per input, one role per axis (scalars: none)
  // Output axes a device can compute its part of from whole (replicated) inputs: the axes a
  // broadcast creates or stretches.
  std::vector<bool> free_out_axes;
};
OpAxes op_axes(const Op& op);

// What an op computes on each device: its outputs' sharding, and what that asks of each input
// (nullopt for scalars).
struct Choice {
  Sharding output;
  std::vector<std::optional<Sharding>> inputs;
  double cost = 0;   // bytes the reshards it needs move (the cost rule above)
  std::string rule;  // why, for `--dump sharding`: "column-parallel from w1", ...
};

using ShardingOf = std::function<const Sharding&(const Value*)>;

// What a symbolic size counts as in the cost rule where `sizes` does not bind it.
constexpr int64_t kSymbolGuess = 4096;

// The cheapest choice given the inputs' current shardings. With `wanted` (a statement the user
// annotated), each choice also pays for resharding its output into `wanted`, and computing
// `wanted` directly is a candidate too.
Choice choose(const Op& op, const ShardingOf& sharding_of, const Bindings& sizes,
              const std::optional<Sharding>& wanted = std::nullopt);
// What producing `output` (replicated or sharded, not partial) asks of the inputs; nullopt when
// no device could compute its part locally.
std::optional<Choice> require(const Op& op, const Sharding& output, const ShardingOf& sharding_of, const Bindings& sizes);

// Bytes a reshard of `v` from one sharding to another moves (the cost rule above).
double reshard_bytes(const Value& v, const Sharding& from, const Sharding& to, const Bindings& sizes);
// The bytes of `v` at `sizes` (symbols not bound counted as kSymbolGuess).
double value_bytes(const Value& v, const Bindings& sizes);

}  // namespace alloy::sharding_rules

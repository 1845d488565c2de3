// Prints Fusions in the canonical `.fusion` text (docs: FUSION_FORMAT.md): every attribute
// spelled out in the op table's order, literals inline, and each statement's inferred type as an
// aligned comment. Parsing the print and printing again gives the same text.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "alloy/ir/fusion.h"

namespace alloy {

struct PrintOptions {
  bool type_comments = true;  // `  # bf16[B, S, 3072]` after each statement
};

std::string print_fusion(const Fusion& fusion, const PrintOptions& options = {});
// One after another, separated by a blank line.
std::string print_fusions(const std::vector<std::unique_ptr<Fusion>>& fusions, const PrintOptions& options = {});
std::string print_fusions(const std::vector<const Fusion*>& fusions, const PrintOptions& options = {});

// How a value appears as an argument: its name, or the literal itself (`2`, `1e-05`, `true`).
std::string operand_str(const Value& value);
// `@mesh[0, 1] replicated` or `@mesh[0, 1] shard(axis=0)`.
std::string sharding_str(const Sharding& sharding);
std::string partial_name(PartialReduce r);
std::string mesh_str(const std::vector<int64_t>& mesh);  // "@mesh[0, 1]"  // "sum", "max", "min"

}  // namespace alloy

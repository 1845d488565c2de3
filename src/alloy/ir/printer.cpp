#include "alloy/ir/printer.h"

#include <algorithm>

#include "alloy/ir/op_table.h"

namespace alloy {
namespace {

// A header longer than this puts one parameter on each line.
constexpr size_t kMaxHeaderWidth = 100;
// Type comments start in one column, unless statements are longer than this.
constexpr size_t kMaxCommentColumn = 60;

template <class Items, class Fn>
std::string join(const Items& items, Fn&& fn) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    out += (first ? "" : ", ") + fn(item);
    first = false;
  }
  return out;
}

std::string header(const Fusion& fusion) {
  std::vector<std::string> params;
  for (const Value* in : fusion.inputs()) {
    std::string p = in->name + ": " + in->type_str();
    if (in->sharding && in->sharding_source.kind == ShardingSource::Kind::user) p.append(" ").append(sharding_str(*in->sharding));
    params.push_back(p);
  }
  std::string one_line = "fusion " + fusion.name() + "(" + join(params, [](auto& p) { return p; }) + ") {";
  if (one_line.size() <= kMaxHeaderWidth) return one_line;
  std::string out = "fusion " + fusion.name() + "(\n";
  for (size_t i = 0; i < params.size(); ++i) out += "    " + params[i] + (i + 1 < params.size() ? ",\n" : "\n");
  return out + ") {";
}

std::string statement(const Op& op) {
  std::string out = join(op.outputs, [](const Value* v) { return v->name; });
  out += " = " + std::string(op_name(op.kind)) + "(";
  std::vector<std::string> args;
  for (const Value* in : op.inputs) args.push_back(operand_str(*in));
  for (const NamedAttr& a : op.attrs) args.push_back(a.name + "=" + a.value.str());
  out += join(args, [](auto& a) { return a; }) + ")";
  // only what the user wrote: shardings the passes work out are listed by `--dump sharding`
  if (!op.outputs.empty() && op.outputs[0]->sharding && op.outputs[0]->sharding_source.kind == ShardingSource::Kind::user)
    out.append(" ").append(sharding_str(*op.outputs[0]->sharding));
  return out;
}

}  // namespace

std::string operand_str(const Value& value) {
  if (!value.literal) return value.name;
  const Literal& lit = *value.literal;
  switch (lit.kind) {
    case Literal::Kind::integer: return std::to_string(lit.i);
    case Literal::Kind::boolean: return lit.b ? "true" : "false";
    case Literal::Kind::real: return Attr::real(lit.f).str();
  }
  internal_error("bad literal kind");
}

std::string partial_name(PartialReduce r) {
  switch (r) {
    case PartialReduce::sum: return "sum";
    case PartialReduce::max: return "max";
    case PartialReduce::min: return "min";
  }
  internal_error("bad partial reduction");
}

std::string mesh_str(const std::vector<int64_t>& mesh) {
  return "@mesh[" + join(mesh, [](int64_t d) { return std::to_string(d); }) + "]";
}

std::string sharding_str(const Sharding& sharding) {
  std::string out = mesh_str(sharding.mesh);
  if (sharding.partial) return out + " partial(" + partial_name(*sharding.partial) + ")";
  return out + (sharding.shard_axis ? " shard(axis=" + std::to_string(*sharding.shard_axis) + ")" : " replicated");
}

std::string print_fusion(const Fusion& fusion, const PrintOptions& options) {
  std::vector<std::string> lines, comments;
  size_t width = 0;
  for (const auto& op : fusion.ops()) {
    lines.push_back("  " + statement(*op));
    comments.push_back(join(op->outputs, [](const Value* v) { return v->type_str(); }));
    if (lines.back().size() <= kMaxCommentColumn) width = std::max(width, lines.back().size());
  }
  std::string out = header(fusion) + "\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    out += lines[i];
    if (options.type_comments) {
      size_t padding = std::max(width, lines[i].size()) - lines[i].size() + 2;
      out += std::string(padding, ' ') + "# " + comments[i];
    }
    out += "\n";
  }
  out += "  return";
  if (!fusion.outputs().empty()) {
    std::vector<std::string> outputs;
    for (size_t i = 0; i < fusion.outputs().size(); ++i) {
      const Value* alias = i < fusion.output_aliases().size() ? fusion.output_aliases()[i] : nullptr;
      outputs.push_back(fusion.outputs()[i]->name + (alias ? " -> " + alias->name : ""));
    }
    out.append(" ").append(join(outputs, [](const std::string& o) { return o; }));
  }
  return out + "\n}\n";
}

std::string print_fusions(const std::vector<const Fusion*>& fusions, const PrintOptions& options) {
  std::string out;
  for (const Fusion* f : fusions) out.append(out.empty() ? "" : "\n").append(print_fusion(*f, options));
  return out;
}

std::string print_fusions(const std::vector<std::unique_ptr<Fusion>>& fusions, const PrintOptions& options) {
  std::vector<const Fusion*> raw;
  for (auto& f : fusions) raw.push_back(f.get());
  return print_fusions(raw, options);
}

}  // namespace alloy

#include "alloy/passes/sharding/sharding_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "alloy/ir/op_table.h"

namespace alloy::sharding_rules {
namespace {

using Kind = AxisRole::Kind;
constexpr double kImpossible = std::numeric_limits<double>::infinity();

AxisRole maps(int out) { return {Kind::maps, out, PartialReduce::sum}; }
AxisRole stretched(int out) { return {Kind::stretched, out, PartialReduce::sum}; }
AxisRole blocked(int out = -1) { return {Kind::blocked, out, PartialReduce::sum}; }
AxisRole contracted() { return {Kind::contracted, -1, PartialReduce::sum}; }
AxisRole reduced(PartialReduce r) { return {Kind::reduced, -1, r}; }

int rank_of(const Value* v) { return v->is_scalar() ? 0 : v->rank(); }

// Input axis a of rank r lined up from the right with output axis a + (R - r); a size-1 axis
// under a longer one is stretched.
std::vector<AxisRole> right_aligned(const Value* in, const Value* out) {
  std::vector<AxisRole> roles;
  int shift = out->rank() - rank_of(in);
  for (int a = 0; a < rank_of(in); ++a) {
    int o = a + shift;
    bool stretch = in->shape()[size_t(a)].is_one() && !out->shape()[size_t(o)].is_one();
    roles.push_back(stretch ? stretched(o) : maps(o));
  }
  return roles;
}

OpAxes reduction_axes(const Op& op) {
  OpAxes r;
  std::vector<int> gone = reduced_axes(op);
  bool keepdim = op.bool_attr("keepdim");
  PartialReduce kind = op.kind == OpKind::max ? PartialReduce::max : op.kind == OpKind::min ? PartialReduce::min : PartialReduce::sum;
  std::vector<AxisRole> roles;
  int out = 0;
  for (int a = 0; a < op.inputs[0]->rank(); ++a) {
    bool is_reduced = std::find(gone.begin(), gone.end(), a) != gone.end();
    if (!is_reduced) roles.push_back(maps(out++));
    else {
      // var_mean's two-pass statistics do not split into per-device terms (the pipeline splits
      // var_mean into means before sharding, so this is the rare leftover)
      roles.push_back(op.kind == OpKind::var_mean ? blocked() : reduced(kind));
      if (keepdim) ++out;
    }
  }
  r.inputs.push_back(std::move(roles));
  return r;
}

// reshape: input and output axes in groups of equal element counts. A group of one axis each
// maps; a merge maps its outermost input axis to the merged axis (the others are blocked); a
// split maps the input axis to its outermost output axis. Anything else is blocked.
OpAxes reshape_axes(const Op& op) {
  const auto& in = op.inputs[0]->shape();
  const auto& out = op.outputs[0]->shape();
  std::vector<AxisRole> roles(in.size(), blocked());
  size_t i = 0, j = 0;
  while (i < in.size() && j < out.size()) {
    if (in[i].is_one()) { ++i; continue; }
    if (out[j].is_one()) { ++j; continue; }
    if (in[i] == out[j]) { roles[i++] = maps(int(j++)); continue; }
    Extent p = in[i];
    size_t k = i + 1;
    while (k < in.size() && !(p == out[j])) p = p * in[k++];
    if (p == out[j]) {  // merge in[i..k) into out[j]
      roles[i] = maps(int(j));
      for (size_t m = i + 1; m < k; ++m) roles[m] = blocked();  // whole, inside each device's rows
      i = k;
      ++j;
      continue;
    }
    p = out[j];
    k = j + 1;
    while (k < out.size() && !(p == in[i])) p = p * out[k++];
    if (p == in[i]) {  // split in[i] into out[j..k)
      roles[i++] = maps(int(j));
      j = k;
      continue;
    }
    break;
  }
  OpAxes r;
  r.inputs.push_back(std::move(roles));
  return r;
}

bool whole_range(const Op& slice, int axis) {
  auto starts = slice.ints_attr("starts"), ends = slice.ints_attr("ends");
  if (size_t(axis) >= starts.size()) return true;
  std::vector<int64_t> steps = slice.attr("steps") ? slice.ints_attr("steps") : std::vector<int64_t>{};
  if (!steps.empty() && steps[size_t(axis)] != 1) return false;
  if (starts[size_t(axis)] != 0) return false;
  auto n = slice.inputs[0]->shape()[size_t(axis)].constant_value();
  return ends[size_t(axis)] >= (n ? *n : int64_t(std::numeric_limits<int32_t>::max()));
}

OpAxes matmul_axes(const Op& op) {
  const Value* a = op.inputs[0];
  const Value* b = op.inputs[1];
  const Value* out = op.outputs[0];
  int ra = a->rank(), rb = b->rank(), ro = out->rank();
  OpAxes r;
  std::vector<AxisRole> ra_roles(size_t(ra), blocked()), rb_roles(size_t(rb), blocked());
  ra_roles[size_t(ra - 1)] = contracted();
  rb_roles[size_t(rb == 1 ? 0 : rb - 2)] = contracted();
  if (ra >= 2) ra_roles[size_t(ra - 2)] = maps(rb == 1 ? ro - 1 : ro - 2);
  if (rb >= 2) rb_roles[size_t(rb - 1)] = maps(ro - 1);
  // batch axes, lined up from the right among the output's batch axes
  int out_batch = ro - (ra >= 2 ? 1 : 0) - (rb >= 2 ? 1 : 0);
  auto batch = [&](const Value* v, int batch_rank, std::vector<AxisRole>& roles) {
    for (int k = 0; k < batch_rank; ++k) {
      int o = k + out_batch - batch_rank;
      bool stretch = v->shape()[size_t(k)].is_one() && !out->shape()[size_t(o)].is_one();
      roles[size_t(k)] = stretch ? stretched(o) : maps(o);
    }
  };
  if (ra > 2) batch(a, ra - 2, ra_roles);
  if (rb > 2) batch(b, rb - 2, rb_roles);
  r.inputs = {ra_roles, rb_roles};
  return r;
}

OpAxes linear_axes(const Op& op) {
  const Value* x = op.inputs[0];
  int out_last = op.outputs[0]->rank() - 1;
  OpAxes r;
  std::vector<AxisRole> xr;
  for (int a = 0; a + 1 < x->rank(); ++a) xr.push_back(maps(a));
  xr.push_back(contracted());
  r.inputs.push_back(xr);
  r.inputs.push_back({maps(out_last), contracted()});
  if (op.inputs.size() > 2) r.inputs.push_back({maps(out_last)});
  return r;
}

OpAxes shape_op_axes(const Op& op) {
  const Value* in = op.inputs[0];
  const Value* out = op.outputs[0];
  OpAxes r;
  r.free_out_axes.assign(size_t(out->rank()), false);
  std::vector<AxisRole> roles;
  switch (op.kind) {
    case OpKind::broadcast_in_dim: {
      auto dims = op.ints_attr("broadcast_dims");
      std::vector<bool> covered(size_t(out->rank()), false);
      for (int a = 0; a < in->rank(); ++a) {
        int o = int(dims[size_t(a)]);
        covered[size_t(o)] = true;
        bool stretch = in->shape()[size_t(a)].is_one() && !out->shape()[size_t(o)].is_one();
        roles.push_back(stretch ? stretched(o) : maps(o));
        if (stretch) r.free_out_axes[size_t(o)] = true;
      }
      for (int o = 0; o < out->rank(); ++o)
        if (!covered[size_t(o)]) r.free_out_axes[size_t(o)] = true;
      break;
    }
    case OpKind::expand: {
      roles = right_aligned(in, out);
      int shift = out->rank() - in->rank();
      for (int o = 0; o < shift; ++o) r.free_out_axes[size_t(o)] = true;
      for (auto& role : roles)
        if (role.kind == Kind::stretched) r.free_out_axes[size_t(role.out_axis)] = true;
      break;
    }
    case OpKind::reshape: return reshape_axes(op);
    case OpKind::permute: {
      auto dims = op.ints_attr("dims");
      roles.assign(size_t(in->rank()), blocked());
      for (int o = 0; o < out->rank(); ++o) {
        int a = int(dims[size_t(o)] < 0 ? dims[size_t(o)] + in->rank() : dims[size_t(o)]);
        roles[size_t(a)] = maps(o);
      }
      break;
    }
    case OpKind::slice:
      for (int a = 0; a < in->rank(); ++a) roles.push_back(whole_range(op, a) ? maps(a) : blocked(a));
      break;
    case OpKind::squeeze: {
      // the axes squeeze removes are size 1 (as infer_squeeze decides); the rest map in order
      std::vector<int64_t> named = op.attr("dims") && op.attr("dims")->kind == Attr::Kind::list ? op.ints_attr("dims")
                                                                                                : std::vector<int64_t>{};
      int o = 0;
      for (int a = 0; a < in->rank(); ++a) {
        bool listed = named.empty() || std::find_if(named.begin(), named.end(), [&](int64_t d) {
                                         return (d < 0 ? d + in->rank() : d) == a;
                                       }) != named.end();
        bool removed = listed && in->shape()[size_t(a)].is_one();
        roles.push_back(removed ? blocked() : maps(o++));
      }
      break;
    }
    case OpKind::unsqueeze: {
      int64_t dim = op.int_attr("dim");
      int at = int(dim < 0 ? dim + out->rank() : dim);
      for (int a = 0; a < in->rank(); ++a) roles.push_back(maps(a < at ? a : a + 1));
      break;
    }
    case OpKind::cat: {
      int64_t dim = op.int_attr("dim");
      int k = int(dim < 0 ? dim + out->rank() : dim);
      for (const Value* v : op.inputs) {
        std::vector<AxisRole> each;
        for (int a = 0; a < v->rank(); ++a) each.push_back(a == k ? blocked(k) : maps(a));
        r.inputs.push_back(std::move(each));
      }
      return r;
    }
    default: internal_error("shape_op_axes: ", op_name(op.kind));
  }
  r.inputs.push_back(std::move(roles));
  return r;
}

// gather(x, index, dim=k): off axis k, out[.., i, ..] reads x at the same i, so an axis both
// inputs have at one size (structurally equal extents) shards on both together; along k each
// device gathers its part of index from the whole of x's axis k. iota (no inputs) has no rule
// that computes a part locally: it is replicated.
OpAxes gather_axes(const Op& op) {
  const Value* x = op.inputs[0];
  const Value* index = op.inputs[1];
  int rank = x->rank();
  int64_t dim = op.int_attr("dim");
  int k = int(dim < 0 ? dim + std::max(1, rank) : dim);
  OpAxes r;
  std::vector<AxisRole> x_roles, index_roles;
  for (int a = 0; a < rank; ++a) {
    bool same = x->shape()[size_t(a)] == index->shape()[size_t(a)];
    if (a == k) {
      x_roles.push_back(blocked());
      index_roles.push_back(maps(a));
    } else {
      x_roles.push_back(same ? maps(a) : blocked(a));
      index_roles.push_back(same ? maps(a) : blocked(a));
    }
  }
  r.inputs = {x_roles, index_roles};
  return r;
}

const char* family_rule(const Op& op) {
  switch (op_row(op.kind).op_class) {
    case OpClass::unary: case OpClass::binary: case OpClass::pointwise: case OpClass::control: return "pointwise";
    case OpClass::reduction: return "reduction";
    case OpClass::shape: return "view";
    case OpClass::matmul: return "matmul";
    case OpClass::indexing: return op.kind == OpKind::gather ? "gather" : "iota (replicated)";
    default: return "op";
  }
}

std::string matmul_rule(const Op& op, const Choice& c, const Value* from) {
  if (c.output.partial) return "row-parallel: contraction over sharded " + from->name;
  if (c.output.is_replicated()) return "replicated";
  int last = op.outputs[0]->rank() - 1;
  if (*c.output.shard_axis == last) return "column-parallel from " + from->name;
  return "batch-parallel from " + from->name;
}

}  // namespace

double value_bytes(const Value& v, const Bindings& sizes) {
  double n = 1;
  for (const Extent& e : v.shape()) {
    if (auto c = e.constant_value()) {
      n *= double(*c);
      continue;
    }
    Bindings at;
    for (auto& [sym, power] : e.powers()) {
      auto it = sizes.find(sym);
      at[sym] = it == sizes.end() ? kSymbolGuess : it->second;
    }
    auto size = e.evaluate(at);
    n *= size ? double(*size) : double(kSymbolGuess);
  }
  return n * double(dtype_size(v.dtype()));
}

OpAxes op_axes(const Op& op) {
  OpAxes r;
  switch (op_row(op.kind).op_class) {
    case OpClass::unary: case OpClass::binary: case OpClass::pointwise: case OpClass::control:
      for (const Value* in : op.inputs) r.inputs.push_back(right_aligned(in, op.outputs[0]));
      break;
    case OpClass::reduction: r = reduction_axes(op); break;
    case OpClass::shape: r = shape_op_axes(op); break;
    case OpClass::matmul: r = op.kind == OpKind::linear ? linear_axes(op) : matmul_axes(op); break;
    case OpClass::indexing: if (op.kind == OpKind::gather) r = gather_axes(op); break;  // iota: no inputs
    default:  // composites (split before sharding) and resharding ops: every axis whole
      for (const Value* in : op.inputs) r.inputs.push_back(std::vector<AxisRole>(size_t(rank_of(in)), blocked()));
  }
  if (r.free_out_axes.empty()) r.free_out_axes.assign(size_t(op.outputs[0]->rank()), false);
  return r;
}

double reshard_bytes(const Value& v, const Sharding& from, const Sharding& to, const Bindings& sizes) {
  if (from == to) return 0;
  if (to.partial) return kImpossible;
  double bytes = value_bytes(v, sizes);
  double n = double(std::max<size_t>(from.mesh.size(), 1));
  if (from.partial) return to.is_replicated() ? 2 * bytes : bytes;
  if (from.is_replicated()) return 0;
  return to.is_replicated() ? bytes : bytes / n;
}

std::optional<Choice> require(const Op& op, const Sharding& output, const ShardingOf& sharding_of, const Bindings& sizes) {
  ALLOY_CHECK(!output.partial, "require: a partial output is chosen, not required");
  // an output axis of a size the mesh does not divide holds no shard (a reshape splitting a
  // sharded 6 into [3, 2] over 2 devices: the op runs on the whole axis instead)
  if (output.shard_axis) {
    const Extent& e = op.outputs[0]->shape()[size_t(*output.shard_axis)];
    std::optional<int64_t> size = e.evaluate(sizes);
    if (size && !output.mesh.empty() && *size % int64_t(output.mesh.size()) != 0) return std::nullopt;
  }
  OpAxes axes = op_axes(op);
  Choice c;
  c.output = output;
  c.rule = family_rule(op);
  bool mapped = false;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const Value* in = op.inputs[i];
    if (in->is_scalar()) {
      c.inputs.push_back(std::nullopt);
      continue;
    }
    Sharding need = Sharding::replicated(output.mesh);
    for (size_t a = 0; a < axes.inputs[i].size() && output.shard_axis; ++a) {
      const AxisRole& role = axes.inputs[i][a];
      if (role.out_axis != *output.shard_axis) continue;
      if (role.kind == Kind::blocked) return std::nullopt;
      if (role.kind == Kind::maps) {
        need = Sharding::shard(output.mesh, int(a));
        mapped = true;
      }
    }
    c.cost += reshard_bytes(*in, sharding_of(in), need, sizes);
    c.inputs.push_back(need);
  }
  if (output.shard_axis && !mapped && !axes.free_out_axes[size_t(*output.shard_axis)]) return std::nullopt;
  return c;
}

Choice choose(const Op& op, const ShardingOf& sharding_of, const Bindings& sizes, const std::optional<Sharding>& wanted) {
  OpAxes axes = op_axes(op);
  std::vector<int64_t> mesh;
  for (const Value* in : op.inputs)
    if (!in->is_scalar()) mesh = sharding_of(in).mesh;
  if (mesh.empty() && wanted) mesh = wanted->mesh;  // an op without tensor inputs (iota)
  std::optional<Choice> best;
  // The reduction a partial output still needs: the reshard into the annotation where there is
  // one, else the output's bytes (what its consumers' reshard will move, counted here so the
  // choice sees it).
  auto consider = [&](std::optional<Choice> c) {
    if (c && wanted) c->cost += reshard_bytes(*op.outputs[0], c->output, *wanted, sizes);
    else if (c && c->output.partial) c->cost += value_bytes(*op.outputs[0], sizes);
    if (c && (!best || c->cost < best->cost)) best = std::move(c);
  };
  if (wanted && !wanted->partial) {
    auto direct = require(op, *wanted, sharding_of, sizes);
    if (direct) direct->rule = "as annotated";
    consider(std::move(direct));
  }
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const Value* in = op.inputs[i];
    if (in->is_scalar()) continue;
    const Sharding& s = sharding_of(in);
    if (!s.shard_axis) continue;
    const AxisRole& role = axes.inputs[i][size_t(*s.shard_axis)];
    if (role.kind == Kind::maps) {
      auto c = require(op, Sharding::shard(mesh, role.out_axis), sharding_of, sizes);
      if (c) c->rule = op_row(op.kind).op_class == OpClass::matmul ? matmul_rule(op, *c, in) : c->rule + " from " + in->name;
      consider(std::move(c));
    } else if (role.kind == Kind::contracted || role.kind == Kind::reduced) {
      // every input with such an axis sharded along it; the others whole
      Choice c;
      c.output = Sharding::partial_of(mesh, role.reduce);
      for (size_t j = 0; j < op.inputs.size(); ++j) {
        const Value* other = op.inputs[j];
        if (other->is_scalar()) {
          c.inputs.push_back(std::nullopt);
          continue;
        }
        Sharding need = Sharding::replicated(mesh);
        for (size_t a = 0; a < axes.inputs[j].size(); ++a)
          if (axes.inputs[j][a].kind == role.kind && (j != i || int(a) == *s.shard_axis)) {
            need = Sharding::shard(mesh, int(a));
            break;
          }
        c.cost += reshard_bytes(*other, sharding_of(other), need, sizes);
        c.inputs.push_back(need);
      }
      c.rule = role.kind == Kind::contracted ? matmul_rule(op, c, in) : "reduction over sharded " + in->name + " -> partial";
      consider(std::move(c));
    }
  }
  auto whole = require(op, Sharding::replicated(mesh), sharding_of, sizes);
  ALLOY_CHECK(whole.has_value(), "every op computes a replicated output from replicated inputs");
  whole->rule = "replicated";
  consider(std::move(whole));
  return *best;
}

}  // namespace alloy::sharding_rules

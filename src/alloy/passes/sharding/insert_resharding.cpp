#include "alloy/passes/sharding/insert_resharding.h"

#include <limits>
#include <map>
#include <set>

#include "alloy/ir/printer.h"
#include "alloy/passes/sharding/sharding_rules.h"
#include "alloy/passes/rebuild.h"

namespace alloy {
namespace {

// The user's annotation, or an output's pinned layout (propagate_sharding): what the op computes
// is resharded into it.
bool fixed(const Value* v) {
  return v->sharding_source.kind == ShardingSource::Kind::user || v->sharding_source.kind == ShardingSource::Kind::pinned;
}

class Resharder {
 public:
  explicit Resharder(Rebuilder& b) : b_(b) {}

  // `v` in sharding `to`: v itself, or the output of one resharding op (named `name`, or a fresh
  // name), shared by every consumer that asks for the same: a value returned (`name`, the
  // output's) that an op already had resharded the same way is that op's result, renamed, not a
  // second collective.
  Value* reshard(Value* v, const Sharding& to, const std::string& name = {}) {
    const Sharding& from = *v->sharding;
    if (from == to) return v;
    auto key = std::make_pair(v, sharding_str(to));
    if (auto it = cache_.find(key); it != cache_.end()) {
      if (name.empty() || it->second->name == name) return it->second;
      if (fresh_names_.erase(it->second)) {
        b_.target.rename_value(it->second, name);
        return it->second;
      }
    }
    OpKind kind;
    std::vector<NamedAttr> attrs;
    const char* suffix;
    if (from.partial) {
      std::string reduce = partial_name(*from.partial);
      if (to.shard_axis) {
        kind = OpKind::reduce_scatter;
        attrs = {{"axis", Attr::integer(*to.shard_axis)}, {"reduce", Attr::string(reduce)}};
        suffix = "scattered";
      } else {
        kind = OpKind::all_reduce;
        attrs = {{"reduce", Attr::string(reduce)}};
        suffix = "reduced";
      }
    } else if (from.shard_axis) {
      if (to.shard_axis) {
        kind = OpKind::all_to_all;
        attrs = {{"from_axis", Attr::integer(*from.shard_axis)}, {"axis", Attr::integer(*to.shard_axis)}};
        suffix = "resharded";
      } else {
        kind = OpKind::all_gather;
        attrs = {{"axis", Attr::integer(*from.shard_axis)}};
        suffix = "gathered";
      }
    } else {
      ALLOY_CHECK(to.shard_axis.has_value(), "reshard of '", v->name, "' to ", sharding_str(to));
      kind = OpKind::shard_slice;
      attrs = {{"axis", Attr::integer(*to.shard_axis)}};
      suffix = "part";
    }
    const std::string out_name = name.empty() ? b_.name_for(v, suffix) : name;
    auto narrow = narrowed_.find(v);
    const bool nan_flagged = from.partial && *from.partial != PartialReduce::sum && is_floating(v->dtype());
    Value* out = b_.target.add_op1(kind, {v}, attrs, {}, narrow == narrowed_.end() && !nan_flagged ? out_name : b_.name_for(v, (std::string(suffix) + (nan_flagged ? "_numbers" : "_f32")).c_str()));
    out->sharding = to;
    out->sharding_source = {ShardingSource::Kind::resharded, v->name, {}};
    if (nan_flagged) out = propagate_nans(v, out, kind, attrs, to, out_name);
    if (narrow != narrowed_.end()) {
      out = b_.target.add_op1(OpKind::cast, {out}, {{"dtype", Attr::dtype(narrow->second)}}, {}, out_name);
      out->sharding = to;
      out->sharding_source = {ShardingSource::Kind::resharded, v->name, {}};
    }
    cache_[key] = out;
    if (name.empty()) fresh_names_.insert(out);
    return out;
  }

  // A max or min over the ranks (`reduced`, the collective's result of the partial `v`) is NaN
  // where any rank's part holds a NaN, as one process's is (MPI's and NCCL's max and min keep the
  // number): a flag of the NaNs, combined by max with the same collective, picks NaN there.
  Value* propagate_nans(Value* v, Value* reduced, OpKind kind, std::vector<NamedAttr> attrs, const Sharding& to,
                        const std::string& name) {
    auto annotate = [&](Value* x, const Sharding& s) {
      x->sharding = s;
      x->sharding_source = {ShardingSource::Kind::resharded, v->name, {}};
      return x;
    };
    Sharding flags = *v->sharding;
    flags.partial = PartialReduce::max;
    Value* nan = annotate(b_.target.add_op1(OpKind::ne, {v, v}, {}, {}, b_.name_for(v, "nan")), flags);
    Value* flag = annotate(b_.target.add_op1(OpKind::cast, {nan}, {{"dtype", Attr::dtype(DType::f32)}}, {}, b_.name_for(v, "nan_f32")), flags);
    for (NamedAttr& a : attrs)
      if (a.name == "reduce") a.value = Attr::string("max");
    Value* any = annotate(b_.target.add_op1(kind, {flag}, attrs, {}, b_.name_for(v, "nan_any")), to);
    Literal zero, not_a_number;
    not_a_number.f = std::numeric_limits<double>::quiet_NaN();
    Value* hit = annotate(b_.target.add_op1(OpKind::gt, {any, b_.target.add_literal(zero)}, {}, {}, b_.name_for(v, "nan_hit")), to);
    return annotate(b_.target.add_op1(OpKind::where, {hit, b_.target.add_literal(not_a_number), reduced}, {}, {}, name), to);
  }

  // A partial sum or mean of a half dtype is combined across the ranks in f32 and rounded once
  // after (as one process sums it): `wide`, the reduction's f32 partial, is cast to `dtype` after
  // each collective of it. (Rounding each rank's part first lost the one-process result: f16 parts
  // past 65504 became +-inf, bf16 parts lost their low bits.)
  void narrow_after_collectives(const Value* wide, DType dtype) { narrowed_[wide] = dtype; }

 private:
  Rebuilder& b_;
  std::map<std::pair<const Value*, std::string>, Value*> cache_;
  std::set<const Value*> fresh_names_;  // reshards named here (b_.name_for), free to take a name asked for
  std::map<const Value*, DType> narrowed_;
};

// A sum or mean of a half dtype computed as a partial (over a sharded axis): reduced in f32.
bool widened_partial(const Op& op, const sharding_rules::Choice& c) {
  const DType t = op.outputs[0]->dtype();
  return c.output.partial && (op.kind == OpKind::sum || op.kind == OpKind::mean) && (t == DType::bf16 || t == DType::f16);
}

const Sharding& old_sharding(const Value* v) {
  ALLOY_CHECK(v->sharding.has_value(), "insert_resharding: '", v->name, "' has no sharding (propagate_sharding first)");
  return *v->sharding;
}

// The choice the op's outputs were propagated from: the cheapest, or (a value sharded by its
// consumers) the one that computes its sharding.
sharding_rules::Choice choice_for(const Op& op, const Bindings& sizes) {
  const Value* out = op.outputs[0];
  if (fixed(out)) return sharding_rules::choose(op, old_sharding, sizes, out->sharding);
  sharding_rules::Choice c = sharding_rules::choose(op, old_sharding, sizes);
  if (*out->sharding == c.output) return c;
  auto required = sharding_rules::require(op, *out->sharding, old_sharding, sizes);
  ALLOY_CHECK(required.has_value(), "'", out->name, "' was given ", sharding_str(*out->sharding), ", which its op cannot compute");
  return *required;
}

}  // namespace

std::unique_ptr<Fusion> insert_resharding(const Fusion& fusion, const Bindings& sizes) {
  auto out = std::make_unique<Fusion>(fusion.name());
  Rebuilder b{*out, {}, &fusion};
  Resharder resharder(b);
  for (Value* in : fusion.inputs()) {
    b.map[in] = out->add_input(in->name, in->type);
    b.map[in]->take_annotations_from(*in);
  }
  for (auto& v : fusion.values())
    if (v->literal) b.map[v.get()] = out->add_literal(*v->literal);
  std::map<Value*, Value*> f32_of;
  for (auto& op : fusion.ops()) {
    sharding_rules::Choice c = choice_for(*op, sizes);
    std::vector<Value*> inputs;
    for (size_t i = 0; i < op->inputs.size(); ++i) {
      Value* v = b[op->inputs[i]];
      inputs.push_back(c.inputs[i] ? resharder.reshard(v, *c.inputs[i]) : v);
    }
    bool annotated_elsewhere = fixed(op->outputs[0]) && !(*op->outputs[0]->sharding == c.output);
    std::vector<std::string> names;
    for (Value* o : op->outputs) names.push_back(annotated_elsewhere ? b.name_for(o, "computed") : o->name);
    const bool widen = widened_partial(*op, c);
    if (widen) {
      Value*& wide = f32_of[inputs[0]];  // (one cast of a value however many reductions read it)
      if (!wide) {
        wide = out->add_op1(OpKind::cast, {inputs[0]}, {{"dtype", Attr::dtype(DType::f32)}}, op->loc, b.name_for(op->inputs[0], "f32"));
        wide->sharding = inputs[0]->sharding;
        wide->sharding_source = {ShardingSource::Kind::propagated, "cast for an f32 partial", {}};
      }
      inputs[0] = wide;
    }
    auto results = out->add_op(op->kind, inputs, op->attrs, op->loc, names);
    if (widen) resharder.narrow_after_collectives(results[0], op->outputs[0]->dtype());
    for (size_t i = 0; i < results.size(); ++i) {
      const Value* old = op->outputs[i];
      if (!annotated_elsewhere) {
        results[i]->take_annotations_from(*old);
        b.map[old] = results[i];
        continue;
      }
      results[i]->sharding = c.output;
      results[i]->sharding_source = {ShardingSource::Kind::propagated, c.rule, {}};
      Value* annotated = resharder.reshard(results[i], *old->sharding, old->name);
      annotated->take_annotations_from(*old);
      b.map[old] = annotated;
    }
  }
  for (Value* o : fusion.outputs()) {
    Value* v = b[o];
    if (v->sharding && v->sharding->partial) {
      out->rename_value(v, b.name_for(v, "partial"));
      v = resharder.reshard(v, Sharding::replicated(v->sharding->mesh), o->name);
    }
    out->add_output(v);
  }
  return out;
}

}  // namespace alloy

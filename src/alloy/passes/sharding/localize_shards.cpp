#include "alloy/passes/sharding/localize_shards.h"

#include <algorithm>

#include "alloy/passes/rebuild.h"

namespace alloy {
namespace {

bool reduces_sharded_axis(const Op& mean) {
  const Value* in = mean.inputs[0];
  if (!in->sharding || !in->sharding->shard_axis) return false;
  int axis = *in->sharding->shard_axis;
  const Attr* dims = mean.attr("dims");
  if (!dims || dims->kind != Attr::Kind::list) return true;
  for (int64_t d : mean.ints_attr("dims"))
    if ((d < 0 ? d + in->rank() : d) == axis) return true;
  return false;
}

class Localizer {
 public:
  Localizer(Fusion& target, const Fusion& source) : b_{target, {}, &source} {}

  Value* add(const Op& op, std::vector<Value*> inputs, const std::vector<std::string>& names) {
    std::vector<ValueType> types;
    for (const Value* o : op.outputs) types.push_back(local_type(*o));
    auto outs = b_.target.add_op_typed(op.kind, std::move(inputs), op.attrs, std::move(types), names, op.loc);
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i]->take_annotations_from(*op.outputs[i]);
      b_.map[op.outputs[i]] = outs[i];
    }
    return outs[0];
  }

  // x * (1/N), of x's local type, under `name`.
  Value* scaled(Value* x, int64_t n, const std::string& name, const Value& like) {
    Literal lit;
    lit.kind = Literal::Kind::real;
    lit.f = 1.0 / double(n);
    Value* factor = b_.target.add_literal(lit);
    Value* out = b_.target.add_op_typed(OpKind::mul, {x, factor}, {}, {x->type}, {name})[0];
    out->take_annotations_from(like);
    return out;
  }

  void copy(const Op& op) {
    std::vector<Value*> inputs;
    for (const Value* in : op.inputs) inputs.push_back(b_[in]);
    std::vector<std::string> names;
    for (const Value* o : op.outputs) names.push_back(o->name);
    const Value* out = op.outputs[0];
    int64_t n = out->sharding ? int64_t(out->sharding->mesh.size()) : 1;
    if (op.kind == OpKind::mean && n > 1 && reduces_sharded_axis(op)) {
      Value* local = add(op, inputs, {b_.name_for(out, "local_mean")});
      b_.map[out] = scaled(local, n, out->name, *out);
      return;
    }
    if (op.kind == OpKind::linear && inputs.size() == 3 && n > 1 && out->sharding->partial) {
      inputs[2] = scaled(inputs[2], n, b_.name_for(op.inputs[2], "share"), *op.inputs[2]);
    }
    add(op, inputs, names);
  }

  Rebuilder b_;
};

}  // namespace

ValueType local_type(const Value& v) {
  ValueType t = v.type;
  if (v.sharding && v.sharding->shard_axis) {
    Extent& e = t.shape.at(size_t(*v.sharding->shard_axis));
    e = e / Extent::constant(int64_t(v.sharding->mesh.size()));
  }
  return t;
}

std::unique_ptr<Fusion> localize_shards(const Fusion& fusion) {
  auto out = std::make_unique<Fusion>(fusion.name());
  Localizer l(*out, fusion);
  for (Value* in : fusion.inputs()) {
    l.b_.map[in] = out->add_input(in->name, local_type(*in));
    l.b_.map[in]->take_annotations_from(*in);
  }
  for (auto& v : fusion.values())
    if (v->literal) l.b_.map[v.get()] = out->add_literal(*v->literal);
  for (auto& op : fusion.ops()) l.copy(*op);
  for (Value* o : fusion.outputs()) out->add_output(l.b_[o]);
  out->take_size_facts_from(fusion);
  return out;
}

}  // namespace alloy

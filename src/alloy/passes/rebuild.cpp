#include "alloy/passes/rebuild.h"

namespace alloy {

void Rebuilder::copy(const Op& op) {
  std::vector<Value*> inputs;
  for (Value* in : op.inputs) inputs.push_back(map.at(in));
  std::vector<std::string> names;
  for (Value* out : op.outputs) names.push_back(out->name);
  auto outs = target.add_op(op.kind, inputs, op.attrs, op.loc, names);
  for (size_t i = 0; i < outs.size(); ++i) {
    outs[i]->take_annotations_from(*op.outputs[i]);
    map[op.outputs[i]] = outs[i];
  }
}

Value* Rebuilder::literal(double v) {
  Literal lit;
  lit.kind = Literal::Kind::real;
  lit.f = v;
  return target.add_literal(lit);
}

std::string Rebuilder::name_for(const Value* old, const char* suffix) const {
  std::string base = old->name + "__" + suffix;
  std::string name = base;
  for (int i = 1; target.find_value(name) || (source && source->find_value(name)); ++i) name = base + std::to_string(i);
  return name;
}

std::unique_ptr<Fusion> rebuild_fusion(const Fusion& fusion, const std::function<bool(const Op&, Rebuilder&)>& rewrite) {
  auto out = std::make_unique<Fusion>(fusion.name());
  Rebuilder b{*out, {}, &fusion};
  for (Value* in : fusion.inputs()) {
    b.map[in] = out->add_input(in->name, in->type);
    b.map[in]->take_annotations_from(*in);
  }
  for (auto& v : fusion.values())
    if (v->literal) b.map[v.get()] = out->add_literal(*v->literal);
  for (auto& op : fusion.ops())
    if (!rewrite(*op, b)) b.copy(*op);
  for (Value* o : fusion.outputs()) out->add_output(b.map.at(o));
  return out;
}

}  // namespace alloy

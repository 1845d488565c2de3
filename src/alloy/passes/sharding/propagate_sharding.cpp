#include "alloy/passes/sharding/propagate_sharding.h"

#include <algorithm>
#include <map>
#include <set>

#include "alloy/ir/op_table.h"
#include "alloy/ir/printer.h"
#include "alloy/passes/sharding/sharding_rules.h"

namespace alloy {
namespace {

using sharding_rules::Choice;

// The user's annotation, or an output's pinned layout: what the op computes is resharded into it.
bool fixed(const Value* v) {
  return v->sharding_source.kind == ShardingSource::Kind::user || v->sharding_source.kind == ShardingSource::Kind::pinned;
}

class Propagation {
 public:
  Propagation(Fusion& fusion, std::vector<int64_t> mesh, const Bindings& sizes)
      : fusion_(fusion), mesh_(std::move(mesh)), sizes_(sizes) {
    for (auto& op : fusion_.ops())
      for (size_t i = 0; i < op->inputs.size(); ++i) consumers_[op->inputs[i]].push_back({op.get(), i});
    for (Value* out : fusion_.outputs()) outputs_.insert(out);
  }

  void run() {
    for (Value* in : fusion_.inputs()) {
      if (in->is_scalar() || in->sharding) continue;
      in->sharding = Sharding::replicated(mesh_);
      in->sharding_source = {ShardingSource::Kind::default_replicated, "", {}};
    }
    for (auto& op : fusion_.ops()) forward(*op);
    for (auto it = fusion_.ops().rbegin(); it != fusion_.ops().rend(); ++it) backward(**it);
  }

 private:
  const Sharding& sharding_of(const Value* v) const {
    ALLOY_CHECK(v->sharding.has_value(), "value '", v->name, "' has no sharding yet");
    return *v->sharding;
  }
  sharding_rules::ShardingOf lookup() const {
    return [this](const Value* v) -> const Sharding& { return sharding_of(v); };
  }

  void forward(const Op& op) {
    std::optional<Sharding> wanted;
    if (fixed(op.outputs[0])) wanted = op.outputs[0]->sharding;
    Choice c = sharding_rules::choose(op, lookup(), sizes_, wanted);
    if (c.output.mesh.empty()) {  // no tensor inputs to take a mesh from (iota): the fusion's, replicated
      c = *sharding_rules::require(op, Sharding::replicated(mesh_), lookup(), sizes_);
      c.rule = "replicated";
    }
    for (Value* out : op.outputs) {
      if (fixed(out)) continue;
      out->sharding = c.output;
      out->sharding_source = {ShardingSource::Kind::propagated, c.rule, {}};
    }
    choices_[&op] = std::move(c);
  }

  // What `consumer` wants of its input `index` under its current choice.
  std::optional<Sharding> wish(const Op* consumer, size_t index) const {
    auto it = choices_.find(consumer);
    return it == choices_.end() ? std::nullopt : it->second.inputs[index];
  }

  void backward(const Op& op) {
    if (op.outputs.size() != 1) return;
    Value* v = op.outputs[0];
    if (v->sharding_source.kind != ShardingSource::Kind::propagated || !v->sharding->is_replicated()) return;
    if (outputs_.count(v) || !consumers_.count(v)) return;
    std::optional<Sharding> wanted;
    const Op* first = nullptr;
    for (auto& [consumer, index] : consumers_.at(v)) {
      std::optional<Sharding> w = wish(consumer, index);
      if (!w || !w->shard_axis || (wanted && !(*wanted == *w))) return;
      wanted = w;
      if (!first) first = consumer;
    }
    std::optional<Choice> c = sharding_rules::require(op, *wanted, lookup(), sizes_);
    if (!c || c->cost > choices_.at(&op).cost) return;
    v->sharding = *wanted;
    v->sharding_source = {ShardingSource::Kind::propagated, "from its consumer " + first->outputs[0]->name, {}};
    choices_[&op] = std::move(*c);
  }

  Fusion& fusion_;
  std::vector<int64_t> mesh_;
  const Bindings& sizes_;
  std::map<const Value*, std::vector<std::pair<const Op*, size_t>>> consumers_;
  std::set<const Value*> outputs_;
  std::map<const Op*, Choice> choices_;
};

std::string source_str(const Value& v) {
  switch (v.sharding_source.kind) {
    case ShardingSource::Kind::none: return "none";
    case ShardingSource::Kind::user: return "user" + (v.sharding_source.loc.known() ? " (" + v.sharding_source.loc.str() + ")" : "");
    case ShardingSource::Kind::default_replicated: return "default (an unannotated parameter is replicated)";
    case ShardingSource::Kind::propagated: return "propagated: " + v.sharding_source.from;
    case ShardingSource::Kind::resharded: return "reshard of " + v.sharding_source.from;
    case ShardingSource::Kind::pinned: return "pinned: " + v.sharding_source.from;
  }
  internal_error("bad sharding source");
}

// A fusion output's layout: a partial one is reduced into a replicated one (insert_resharding).
Sharding layout_of(const Value& output) {
  Sharding layout = *output.sharding;
  layout.partial.reset();
  return layout;
}

bool layouts_differ(const Fusion& sized, const Fusion& unbound) {
  for (size_t i = 0; i < sized.outputs().size(); ++i)
    if (!(layout_of(*sized.outputs()[i]) == layout_of(*unbound.outputs()[i]))) return true;
  return false;
}

// Pins every output the user did not annotate to its layout in `unbound` (the fusion propagated
// where no size is bound). Only single-output ops' outputs: var_mean, the one op of two outputs,
// is split before sharding.
void pin_outputs(Fusion& fusion, const Fusion& unbound) {
  for (size_t i = 0; i < fusion.outputs().size(); ++i) {
    Value* v = fusion.outputs()[i];
    if (!v->producer || v->producer->outputs.size() != 1 || v->sharding_source.kind == ShardingSource::Kind::user) continue;
    v->sharding = layout_of(*unbound.outputs()[i]);
    v->sharding_source = {ShardingSource::Kind::pinned, "the layout '" + v->name + "' has where no size is bound", {}};
  }
}

}  // namespace

std::unique_ptr<Fusion> propagate_sharding(const Fusion& fusion, const Bindings& sizes) {
  auto mesh = fusion_mesh(fusion);
  std::unique_ptr<Fusion> out = fusion.clone();
  if (!mesh) return out;
  // A collective written in the text would be read as an op that needs its input whole (the
  // rules block every axis of it), so a gather would be inserted in front and the written one
  // would gather again: the user states placements, insert_resharding writes the collectives.
  for (auto& op : fusion.ops())
    if (is_communication(op->kind))
      user_error(op->loc, op_name(op->kind), " is a resharding step that Alloy inserts itself (--dump after=insert_resharding "
                 "shows them), not an op a fusion with a mesh may state; expected placements instead: annotate the value "
                 "`", op->outputs[0]->name, " = ... @mesh[...] shard(axis=K)` or `replicated`, and the collective follows");
  Propagation(*out, *mesh, sizes).run();
  if (!sizes.empty()) {
    // the outputs keep their layouts from where no size is bound: where the sizes lay one out
    // otherwise, propagate again with them pinned (what an op computes is resharded into its pin)
    std::unique_ptr<Fusion> unbound = propagate_sharding(fusion);
    if (layouts_differ(*out, *unbound)) {
      out = fusion.clone();
      pin_outputs(*out, *unbound);
      Propagation(*out, *mesh, sizes).run();
    }
  }
  check_in_place_shardings(fusion, *out);
  return out;
}

// `return y -> p` writes each device's part of y into its part of p, so y must be laid out as p
// is. A partial y is all-reduced into a replicated output (insert_resharding), so it counts as
// replicated. Alloy does not reshard into the input: the user states the layout, as for any
// other change of placement (an annotation on y makes the reshard an op of the fusion).
void check_in_place_shardings(const Fusion& declared, const Fusion& propagated) {
  const std::vector<Value*>& aliases = declared.output_aliases();
  for (size_t i = 0; i < aliases.size() && i < propagated.outputs().size(); ++i) {
    if (!aliases[i]) continue;
    size_t k = size_t(std::find(declared.inputs().begin(), declared.inputs().end(), aliases[i]) - declared.inputs().begin());
    if (k >= propagated.inputs().size()) continue;
    const Value* input = propagated.inputs()[k];
    const Value* output = propagated.outputs()[i];
    if (!input->sharding || !output->sharding) continue;
    Sharding laid_out = *output->sharding;
    laid_out.partial.reset();
    if (laid_out == *input->sharding) continue;
    user_error(declared.output_loc(i), "return ", output->name, " -> ", input->name, ": '", output->name, "' is ",
               sharding_str(*output->sharding), " (", source_str(*output), ") but input '", input->name, "' is ",
               sharding_str(*input->sharding), "; an in-place output must have its input's sharding (annotate `",
               output->name, " = ... ", sharding_str(*input->sharding), "` to reshard it)");
  }
}

std::string sharding_report(const Fusion& fusion) {
  std::string out;
  auto line = [&](const Value& v) {
    if (v.is_scalar()) return;
    out += v.name + ": " + v.type_str() + " " + (v.sharding ? sharding_str(*v.sharding) : "(no mesh)") + "  # " + source_str(v) + "\n";
  };
  for (const Value* in : fusion.inputs()) line(*in);
  for (auto& op : fusion.ops())
    for (const Value* v : op->outputs) line(*v);
  return out;
}

}  // namespace alloy

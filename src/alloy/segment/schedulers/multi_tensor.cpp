#include "alloy/segment/schedulers/multi_tensor.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>

#include "alloy/ir/op_table.h"
#include "alloy/segment/schedulers/generated_scheduler.h"
#include "alloy/segment/schedulers/kernel_analysis.h"

namespace alloy {
namespace {

// CUDA passes at most 32,764 bytes to a kernel (as generated_scheduler bounds a kernel's words).
constexpr int kMaxParamWords = 4000;

class UnionFind {
 public:
  explicit UnionFind(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  size_t find(size_t i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  void join(size_t a, size_t b) {
    a = find(a), b = find(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);  // the root is the chain's first op
  }

 private:
  std::vector<size_t> parent_;
};

bool computes_scalars_only(const Op& op) {
  for (const Value* out : op.outputs)
    if (!out->is_scalar()) return false;
  return !op.outputs.empty();
}

// The fusion's chains (see the header), each in definition order, ordered by their first op.
std::vector<std::vector<const Op*>> find_chains(const Fusion& fusion) {
  const auto& ops = fusion.ops();
  std::unordered_map<const Op*, size_t> index;
  for (size_t i = 0; i < ops.size(); ++i) index[ops[i].get()] = i;
  UnionFind chains(ops.size());
  std::unordered_map<const Value*, size_t> first_reader;
  std::unordered_map<const Value*, std::vector<size_t>> readers;
  for (size_t i = 0; i < ops.size(); ++i)
    for (const Value* v : ops[i]->inputs) {
      if (v->literal) continue;
      readers[v].push_back(i);
      if (v->is_scalar()) continue;  // scalars join nothing here
      if (v->producer) chains.join(i, index.at(v->producer));
      else if (auto [it, fresh] = first_reader.emplace(v, i); !fresh) chains.join(i, it->second);
    }
  // a scalar op joins the one chain that reads its results (last first: a scalar read by a scalar
  // op follows it); one read by several chains, or returned, stays on its own
  std::unordered_map<const Value*, bool> returned;
  for (const Value* out : fusion.outputs()) returned[out] = true;
  for (size_t i = ops.size(); i-- > 0;) {
    if (!computes_scalars_only(*ops[i])) continue;
    std::optional<size_t> chain;
    bool one = true;
    for (const Value* out : ops[i]->outputs) {
      if (returned.count(out)) one = false;
      for (size_t r : readers[out]) {
        size_t root = chains.find(r);
        if (chain && *chain != root) one = false;
        chain = root;
      }
    }
    if (one && chain) chains.join(i, *chain);
  }
  std::map<size_t, std::vector<const Op*>> by_root;
  for (size_t i = 0; i < ops.size(); ++i) by_root[chains.find(i)].push_back(ops[i].get());
  std::vector<std::vector<const Op*>> out;
  for (auto& [root, chain] : by_root) out.push_back(std::move(chain));
  return out;
}

bool computes_tensors(const std::vector<const Op*>& chain) {
  for (const Op* op : chain)
    if (!computes_scalars_only(*op)) return true;
  return false;
}

// "m_kept_0=mul ... p2_0=sub (17 ops)": a chain as a refusal names it.
std::string chain_text(const std::vector<const Op*>& chain) {
  if (chain.size() <= 3) return describe(chain);
  return describe({chain.front()}) + " ... " + describe({chain.back()}) + " (" + std::to_string(chain.size()) + " ops)";
}

// A chain that may join a group: its pointwise segment, and each of its values by its place in
// the chain (inputs and results by first appearance), which members of a group share.
struct Candidate {
  std::vector<const Op*> ops;
  Segment segment;
  std::string structure;  // equal for chains a kernel computes alike
  std::vector<Value*> by_place;
  std::map<const Value*, int> place;
};

std::string literal_key(const Literal& l) {
  switch (l.kind) {
    case Literal::Kind::integer: return Attr::integer(l.i).str();
    case Literal::Kind::boolean: return l.b ? "true" : "false";
    case Literal::Kind::real: break;
  }
  return Attr::real(l.f).str();
}

std::string value_type(const Value* v) { return std::string(dtype_name(v->dtype())) + (v->is_scalar() ? "s" : ""); }

// The chain's structure as text: each op's kind, attributes and arguments by place (a literal by
// its value; a scalar read from outside by its place too, so chains that read different scalars
// there are one structure), then the places of its results.
void describe_structure(Candidate& c) {
  std::string& text = c.structure;
  auto place_of = [&](Value* v) {
    auto [it, fresh] = c.place.emplace(v, int(c.by_place.size()));
    if (fresh) c.by_place.push_back(v);
    return std::to_string(it->second);
  };
  for (const Op* op : c.ops) {
    text += std::string(op_name(op->kind)) + "(";
    for (const NamedAttr& a : op->attrs) text += a.name + "=" + a.value.str() + ",";
    // (appended piece by piece: GCC 12's -Wrestrict misfires on a literal + a temporary)
    for (Value* in : op->inputs) {
      text += in->literal ? "#" : c.place.count(in) ? "v" : "in";
      text += in->literal ? literal_key(*in->literal) : place_of(in);
      text += ":";
      text += value_type(in);
      text += ",";
    }
    text += ")->";
    for (Value* out : op->outputs) {
      text += place_of(out);
      text += ":";
      text += value_type(out);
      text += ",";
    }
    text += ";";
  }
  text += "returns";
  for (Value* out : c.segment.outputs) {
    text += " ";
    text += place_of(out);
  }
}

// Why `chain` cannot join a group, or its candidate.
std::variant<Candidate, std::string> candidate(const std::vector<const Op*>& chain, const ValueReaders& readers) {
  const std::vector<Extent>* shape = nullptr;
  const Value* first = nullptr;
  for (const Op* op : chain) {
    if (!is_pointwise(op->kind)) return "'" + op->outputs.at(0)->name + " = " + std::string(op_name(op->kind)) + "' is not pointwise";
    for (const auto* list : {&op->inputs, &op->outputs})
      for (const Value* v : *list) {
        if (v->literal || v->is_scalar()) continue;
        if (!shape) shape = &v->shape(), first = v;
        if (!(v->shape() == *shape))
          return "'" + first->name + "' (" + first->type_str() + ") and '" + v->name + "' (" + v->type_str() +
                 ") differ in shape: each tensor of a member is read and written as one flat vector";
      }
  }
  Verdict verdict = can_schedule_generated(Offer{readers, chain, 0});
  if (auto* why = std::get_if<std::string>(&verdict)) return "not one generated kernel: " + *why;
  Candidate c;
  c.ops = chain;
  c.segment = std::get<Segment>(std::move(verdict));
  const KernelAnalysis& a = *c.segment.analysis;
  if (c.segment.scheduler != SchedulerKind::pointwise || !a.host_views.empty() || !a.cat_leaves.empty() || a.has_indexing())
    return std::string("its kernel reads views, cats or positions");
  for (const Value* out : c.segment.outputs)
    if (out->is_scalar()) return "it returns the scalar '" + out->name + "'";
  describe_structure(c);
  return c;
}

// Member `c`'s values in the template's launch order (each leaf, then each output).
std::vector<Value*> launch_order(const Candidate& c, const Candidate& model) {
  std::vector<Value*> values;
  const KernelAnalysis& a = *model.segment.analysis;
  for (const auto* list : {&a.leaves, &a.outputs})
    for (const Value* v : *list) values.push_back(c.by_place.at(size_t(model.place.at(v))));
  return values;
}

// Member `c`'s value of the template's scalar input k.
Value* scalar_of(const Candidate& c, const Candidate& model, size_t k) {
  return c.by_place.at(size_t(model.place.at(model.segment.analysis->scalar_inputs.at(k))));
}

// Which of the template's scalar inputs differ between `members` (the chains of one structure).
std::vector<bool> scalars_per_member(const std::vector<Candidate*>& members) {
  const Candidate& model = *members.at(0);
  std::vector<bool> per_member(model.segment.analysis->scalar_inputs.size(), false);
  for (size_t k = 0; k < per_member.size(); ++k)
    for (const Candidate* m : members) per_member[k] = per_member[k] || scalar_of(*m, model, k) != scalar_of(model, model, k);
  return per_member;
}

// "; scalars per member: lr_d|lr_n, wd_d|wd_n": each per-member scalar's values, first seen first.
std::string per_member_note(const MultiTensorGroup& group) {
  std::string note;
  for (size_t j = 0; j < (group.scalars.empty() ? 0 : group.scalars[0].size()); ++j) {
    std::vector<const Value*> seen;
    for (const auto& member : group.scalars)
      if (std::find(seen.begin(), seen.end(), member[j]) == seen.end()) seen.push_back(member[j]);
    note += j ? ", " : "; scalars per member: ";
    for (size_t n = 0; n < seen.size() && n < 4; ++n) note += (n ? "|" : "") + seen[n]->name;
    if (seen.size() > 4) note += "|... (" + std::to_string(seen.size()) + ")";
  }
  return note;
}

Segment group_segment(std::vector<Candidate*> members, const std::vector<bool>& per_member, const ValueReaders& readers) {
  auto group = std::make_shared<MultiTensorGroup>();
  group->per_member = per_member;
  Segment s;
  s.scheduler = SchedulerKind::multi_tensor;
  for (Candidate* m : members) {
    s.ops.insert(s.ops.end(), m->ops.begin(), m->ops.end());
    group->tensors.push_back(launch_order(*m, *members[0]));
    group->members.push_back(m->segment);
    group->scalars.emplace_back();
    for (size_t k = 0; k < per_member.size(); ++k)
      if (per_member[k]) group->scalars.back().push_back(scalar_of(*m, *members[0], k));
  }
  compute_segment_boundary(readers, s);
  const KernelAnalysis& a = group->kernel();
  s.note = std::to_string(members.size()) + " chains of " + std::to_string(members[0]->ops.size()) + " ops, " +
           std::to_string(a.leaves.size()) + " tensors read and " + std::to_string(a.outputs.size()) +
           " written each: one launch over a table of their tensors" + per_member_note(*group);
  s.group = std::move(group);
  return s;
}

}  // namespace

int max_multi_tensor_members(int leaves, int outputs, int shared, int per_member) {
  return std::max(1, (kMaxParamWords - 2 - shared) / (3 + leaves + outputs + per_member));
}

std::vector<Segment> group_multi_tensor(const Fusion& fusion, const ValueReaders& readers, std::vector<Refusal>& refusals,
                                        std::unordered_set<const Op*>& grouped) {
  std::vector<std::vector<const Op*>> chains = find_chains(fusion);
  std::vector<std::variant<Candidate, std::string>> verdicts;
  std::map<std::string, std::vector<size_t>> by_structure;
  std::vector<std::string> structures;  // in order of first appearance
  for (const auto& chain : chains) {
    verdicts.push_back(computes_tensors(chain) ? candidate(chain, readers) : std::string());
    if (auto* c = std::get_if<Candidate>(&verdicts.back())) {
      auto& list = by_structure[c->structure];
      if (list.empty()) structures.push_back(c->structure);
      list.push_back(verdicts.size() - 1);
    }
  }
  std::vector<Segment> segments;
  for (const std::string& structure : structures) {
    const std::vector<size_t>& list = by_structure.at(structure);
    if (list.size() < 2) continue;
    std::vector<Candidate*> all;
    for (size_t i : list) all.push_back(&std::get<Candidate>(verdicts[i]));
    const KernelAnalysis& a = *all[0]->segment.analysis;
    const std::vector<bool> per_member = scalars_per_member(all);  // over the whole group: every launch's layout alike
    const int own = int(std::count(per_member.begin(), per_member.end(), true));
    size_t most = size_t(max_multi_tensor_members(int(a.leaves.size()), int(a.outputs.size()), int(per_member.size()) - own, own));
    for (size_t first = 0; first < all.size(); first += most) {
      std::vector<Candidate*> members(all.begin() + ptrdiff_t(first), all.begin() + ptrdiff_t(std::min(all.size(), first + most)));
      for (Candidate* m : members) grouped.insert(m->ops.begin(), m->ops.end());
      segments.push_back(group_segment(std::move(members), per_member, readers));
    }
  }
  // why each other chain computing tensors was left out, where a group was formed or two chains
  // could have been one (a fusion of one chain, or of chains no launch could take, says nothing)
  size_t candidates = 0;
  for (const auto& verdict : verdicts) candidates += std::holds_alternative<Candidate>(verdict);
  if (segments.empty() && candidates < 2) return segments;
  for (size_t i = 0; i < chains.size(); ++i) {
    if (!computes_tensors(chains[i]) || grouped.count(chains[i].front())) continue;
    std::string why = std::holds_alternative<std::string>(verdicts[i])
                          ? std::get<std::string>(verdicts[i])
                          : "no other chain has its structure (its ops, attributes, dtypes, literals, the places it reads scalars and its results)";
    refusals.push_back({"multi_tensor", chain_text(chains[i]), why});
  }
  return segments;
}

}  // namespace alloy

#include "alloy/passes/unify_extents.h"

#include <algorithm>
#include <map>

namespace alloy {
namespace {

// Union-find over symbol names; a class may also hold one constant.
class Classes {
 public:
  std::string find(const std::string& s) {
    auto it = parent_.find(s);
    if (it == parent_.end() || it->second == s) return s;
    return it->second = find(it->second);
  }
  void join(const std::string& a, const std::string& b) {
    std::string ra = find(a), rb = find(b);
    if (ra == rb) return;
    parent_[ra] = rb;
    parent_.try_emplace(rb, rb);
    if (auto c = constant_.find(ra); c != constant_.end()) constant_[rb] = c->second;
  }
  void set_constant(const std::string& s, int64_t c) { constant_[find(s)] = c; }
  std::optional<int64_t> constant(const std::string& s) {
    auto it = constant_.find(find(s));
    return it == constant_.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  std::vector<std::string> members() const {
    std::vector<std::string> out;
    for (auto& [s, p] : parent_) out.push_back(s);
    return out;
  }
  void add(const std::string& s) { parent_.try_emplace(s, s); }

 private:
  std::map<std::string, std::string> parent_;
  std::map<std::string, int64_t> constant_;
};

// e with each symbol of `to` replaced by its extent.
Extent substitute(const Extent& e, const std::map<std::string, Extent>& to) {
  Extent out = Extent::constant(e.numerator()) / Extent::constant(e.denominator());
  for (auto& [name, power] : e.powers()) {
    auto it = to.find(name);
    Extent base = it == to.end() ? Extent::symbol(name) : it->second;
    for (int k = 0; k < std::abs(power); ++k) out = power > 0 ? out * base : out / base;
  }
  return out;
}

}  // namespace

std::unique_ptr<Fusion> unify_extents(const Fusion& fusion) {
  auto out = fusion.clone();
  Classes classes;
  for (const Fusion::Constraint& c : out->constraints()) {
    auto a = c.a.as_symbol(), b = c.b.as_symbol();  // a class holds single symbols and one constant
    if (a && b) {
      classes.join(*a, *b);
    } else if (a && c.b.constant_value()) {
      classes.add(*a);
      classes.set_constant(*a, *c.b.constant_value());
    } else if (b && c.a.constant_value()) {
      classes.add(*b);
      classes.set_constant(*b, *c.a.constant_value());
    }
  }
  std::vector<std::string> members = classes.members();
  if (members.empty()) return out;

  // Each class's representative: its constant, else its first input symbol, else its first
  // derived size (derived sizes are defined in order, so an earlier one never names a later one).
  const std::vector<std::string> inputs = out->input_symbols();
  std::vector<std::string> order = inputs;
  for (const auto& d : out->derived_symbols()) order.push_back(d.name);
  std::map<std::string, Extent> to;
  std::map<std::string, std::string> chosen;  // class root -> representative symbol
  for (const std::string& s : order) {
    if (std::find(members.begin(), members.end(), s) == members.end()) continue;
    chosen.try_emplace(classes.find(s), s);
  }
  for (const std::string& s : members) {
    if (auto c = classes.constant(s)) {
      to.emplace(s, Extent::constant(*c));
      continue;
    }
    auto rep = chosen.find(classes.find(s));
    if (rep != chosen.end() && rep->second != s) to.emplace(s, Extent::symbol(rep->second));
  }
  if (to.empty()) return out;

  for (auto& v : out->values())
    for (Extent& e : v->type.shape) e = substitute(e, to);
  out->rewrite_derived_terms([&](const Extent& e) { return substitute(e, to); });
  // Input symbols no input carries after the rewrite: bound as derived sizes equal to their
  // representative (the representative is an input symbol or a constant, bound before them).
  for (auto& [name, extent] : to)
    if (std::find(inputs.begin(), inputs.end(), name) != inputs.end()) out->define_alias(name, extent);
  return out;
}

}  // namespace alloy

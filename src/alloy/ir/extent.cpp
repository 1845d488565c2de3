#include "alloy/ir/extent.h"

#include <numeric>
#include <ostream>

#include "alloy/common/error.h"

namespace alloy {

Extent Extent::constant(int64_t value) {
  Extent e;
  e.num_ = value;
  return e;
}

Extent Extent::symbol(std::string name) {
  Extent e;
  e.powers_[std::move(name)] = 1;
  return e;
}

Extent Extent::dynamic(int id) { return symbol("?" + std::to_string(id)); }

std::optional<int64_t> Extent::constant_value() const {
  if (!is_constant()) return std::nullopt;
  return num_;
}

std::optional<std::string> Extent::as_symbol() const {
  if (num_ != 1 || den_ != 1 || powers_.size() != 1 || powers_.begin()->second != 1) return std::nullopt;
  return powers_.begin()->first;
}

bool Extent::is_dynamic_symbol() const {
  auto s = as_symbol();
  return s && !s->empty() && (*s)[0] == '?';
}

void Extent::normalize() {
  if (den_ < 0) { den_ = -den_; num_ = -num_; }
  int64_t g = std::gcd(num_, den_);
  if (g > 1) { num_ /= g; den_ /= g; }
  if (num_ == 0) { powers_.clear(); den_ = 1; }
  for (auto it = powers_.begin(); it != powers_.end();) {
    if (it->second == 0) it = powers_.erase(it);
    else ++it;
  }
}

Extent Extent::operator*(const Extent& other) const {
  Extent r = *this;
  // multiply crosswise first to keep numbers small
  int64_t g1 = std::gcd(r.num_, other.den_), g2 = std::gcd(other.num_, r.den_);
  if (g1 == 0) g1 = 1;
  if (g2 == 0) g2 = 1;
  __int128 num = __int128(r.num_ / g1) * (other.num_ / g2);
  __int128 den = __int128(r.den_ / g2) * (other.den_ / g1);
  constexpr __int128 limit = __int128(1) << 62;
  if (num > limit || num < -limit || den > limit)
    throw SizeOverflow("size " + str() + " * " + other.str() + " is too large (sizes must stay below 2^62)");
  r.num_ = int64_t(num);
  r.den_ = int64_t(den);
  for (auto& [name, p] : other.powers_) r.powers_[name] += p;
  r.normalize();
  return r;
}

Extent Extent::operator/(const Extent& other) const {
  if (other.num_ == 0) internal_error("extent divided by zero");
  Extent inv;
  inv.num_ = other.den_;
  inv.den_ = other.num_;
  for (auto& [name, p] : other.powers_) inv.powers_[name] = -p;
  inv.normalize();
  return *this * inv;
}

bool Extent::operator<(const Extent& other) const {
  if (num_ != other.num_) return num_ < other.num_;
  if (den_ != other.den_) return den_ < other.den_;
  return powers_ < other.powers_;
}

std::optional<int64_t> Extent::evaluate(const Bindings& bindings) const {
  // Accumulate numerator and denominator separately, dividing exactly at the end.
  // Sizes past 2^62 are no size at all (and would overflow the products below): nullopt.
  constexpr __int128 kLimit = __int128(1) << 62;
  __int128 num = num_, den = den_;
  for (auto& [name, p] : powers_) {
    auto it = bindings.find(name);
    if (it == bindings.end()) return std::nullopt;
    for (int i = 0; i < (p > 0 ? p : -p); ++i) {
      __int128& side = p > 0 ? num : den;
      side *= it->second;
      if (side > kLimit || side < -kLimit) return std::nullopt;
    }
  }
  if (den == 0 || num % den != 0) return std::nullopt;
  return int64_t(num / den);
}

std::string Extent::str(bool dynamic_as_question) const {
  std::string out;
  auto append = [&](const std::string& part) {
    if (!out.empty()) out += "*";
    out += part;
  };
  if (num_ != 1 || powers_.empty()) append(std::to_string(num_));
  std::string den_part = den_ != 1 ? std::to_string(den_) : "";
  for (auto& [name, p] : powers_) {
    std::string shown = (dynamic_as_question && !name.empty() && name[0] == '?') ? "?" : name;
    for (int i = 0; i < p; ++i) append(shown);
    for (int i = 0; i < -p; ++i) den_part += (den_part.empty() ? "" : "*") + shown;
  }
  if (out.empty()) out = "1";
  if (!den_part.empty()) out += "/" + den_part;
  return out;
}

std::ostream& operator<<(std::ostream& os, const Extent& e) { return os << e.str(); }

}  // namespace alloy

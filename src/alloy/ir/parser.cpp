#include "alloy/ir/parser.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <deque>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <unordered_map>

#include "alloy/common/files.h"
#include "alloy/ir/op_table.h"

namespace alloy {
namespace {

// Attribute lists are the only recursive construct; deeper nesting is a mistake, not a program.
constexpr int kMaxListDepth = 32;
// Identifiers and numbers quoted in messages are cut to this many characters.
constexpr size_t kMaxQuoted = 40;
constexpr uint64_t kInt64Max = uint64_t(std::numeric_limits<int64_t>::max());

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

// Printable ASCII as is, anything else as \xNN, cut to kMaxQuoted characters.
std::string quoted_text(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMaxQuoted; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > kMaxQuoted) out += "...";
  return out;
}

// One character of the text as an error shows it: a whole UTF-8 character as itself with its code
// point ('ü' (U+00FC)), anything else as quoted_text escapes it.
std::string character_text(std::string_view c) {
  const unsigned char lead = static_cast<unsigned char>(c.empty() ? 0 : c[0]);
  const size_t length = lead >= 0xf0 && lead < 0xf8 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc2 ? 2 : 1;
  if (lead < 0x80 || length == 1 || c.size() != length) return "'" + quoted_text(c) + "'";
  uint32_t code = lead & (0x7f >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((static_cast<unsigned char>(c[i]) & 0xc0) != 0x80) return "'" + quoted_text(c) + "'";
    code = code << 6 | (static_cast<unsigned char>(c[i]) & 0x3f);
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "U+%04X", unsigned(code));
  return "'" + std::string(c) + "' (" + hex + ")";
}

enum class TokKind { ident, integer, real, string, punct, end };

struct Token {
  TokKind kind = TokKind::end;
  std::string text;        // identifier, punctuation or number as written; a string's contents
  uint64_t magnitude = 0;  // integer: its value (the sign is a separate '-' token)
  bool overflow = false;   // integer: does not fit in 64 bits
  double real = 0;
  int line = 1, col = 1;

  bool is(char c) const { return kind == TokKind::punct && text.size() == 1 && text[0] == c; }
  bool is_word(std::string_view w) const { return kind == TokKind::ident && text == w; }
};

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokKind::end: return "end of input";
    case TokKind::string: return std::string("\"").append(quoted_text(t.text)).append("\"");
    case TokKind::integer: case TokKind::real: return quoted_text(t.text);
    default: return std::string("'").append(quoted_text(t.text)).append("'");
  }
}

// Edit distance, for "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "; did you mean 'gelu'?" when one candidate is close to `word`, else "".
template <class Names>
std::string suggestion(std::string_view word, const Names& candidates) {
  if (word.empty() || word.size() > 64) return "";
  // At most a third of the word may change (one edit for short words), and never all of it.
  size_t best = std::min(std::max<size_t>(1, word.size() / 3), word.size() - 1) + 1;
  std::string best_name;
  for (const auto& c : candidates) {
    std::string_view name(c);
    if (name.size() > 64) continue;
    size_t d = edit_distance(word, name);
    if (d < best) {
      best = d;
      best_name = std::string(name);
    }
  }
  return best_name.empty() ? "" : "; did you mean '" + best_name + "'?";
}

const char* const kDTypeList = "f64 f32 f16 bf16 i64 i32 bool";

std::vector<std::string> dtype_names() {
  return {"f64", "f32", "f16", "bf16", "i64", "i32", "bool"};
}

// Tokens on demand, so an error is reported where reading stopped, not at a bad byte further on.
class Lexer {
 public:
  Lexer(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  const Token& peek(size_t k = 0) {
    while (ahead_.size() <= k) ahead_.push_back(lex());
    return ahead_[k];
  }
  Token next() {
    peek();
    Token t = std::move(ahead_.front());
    ahead_.pop_front();
    return t;
  }
  SourceLoc loc(const Token& t) const { return SourceLoc{file_, t.line, t.col}; }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char cur(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  // A line ends at \n, \r\n or a lone \r (old Mac files): one line each.
  void advance() {
    if (text_[pos_] == '\n' || (text_[pos_] == '\r' && cur(1) != '\n')) {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  template <class... Parts>
  [[noreturn]] void fail(int line, int col, const Parts&... parts) const {
    user_error(SourceLoc{file_, line, col}, parts...);
  }

  void skip_space_and_comments() {
    while (!at_end()) {
      char c = cur();
      if (c == '#') {
        while (!at_end() && cur() != '\n' && cur() != '\r') advance();
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        advance();
      } else {
        return;
      }
    }
  }

  Token lex() {
    skip_space_and_comments();
    Token t;
    t.line = line_;
    t.col = col_;
    if (at_end()) return t;
    char c = cur();
    if (is_ident_start(c)) {
      size_t start = pos_;
      while (!at_end() && is_ident_char(cur())) advance();
      if (!at_end() && static_cast<unsigned char>(cur()) >= 0x80) {  // a name going on past ASCII: one error, at its character
        const int line = line_, col = col_;
        const size_t at = pos_;
        fail(line, col, "unexpected character ", character_text(skip_character()), " in the name '",
             quoted_text(std::string_view(&text_[start], at - start)), "...' (names are ASCII letters, digits and _)");
      }
      t.kind = TokKind::ident;
      t.text = std::string(text_.substr(start, pos_ - start));
      return t;
    }
    if (is_digit(c) || (c == '.' && is_digit(cur(1)))) return lex_number(t);
    if (c == '"') return lex_string(t);
    if (c == '-' && cur(1) == '>') {  // `return y -> x`: y is written into input x
      t.kind = TokKind::punct;
      t.text = "->";
      advance();
      advance();
      return t;
    }
    if (std::string_view("()[]{},:=@?-").find(c) != std::string_view::npos) {
      t.kind = TokKind::punct;
      t.text = std::string(1, c);
      advance();
      return t;
    }
    // past it: a later token is read after it, so it is told once
    fail(t.line, t.col, "unexpected character ", character_text(skip_character()));
  }

  // Past the character at the cursor, which it returns: a UTF-8 character whole (its lead byte and
  // the continuation bytes after it, 10xxxxxx), else one byte.
  std::string_view skip_character() {
    const size_t start = pos_;
    const bool lead = static_cast<unsigned char>(cur()) >= 0xc0;
    advance();
    if (lead)
      while (!at_end() && (static_cast<unsigned char>(cur()) & 0xc0) == 0x80 && pos_ - start < 4) advance();
    return std::string_view(&text_[start], pos_ - start);
  }

  Token lex_number(Token& t) {
    size_t start = pos_;
    bool real = false;
    while (is_digit(cur())) advance();
    if (cur() == '.') {
      real = true;
      advance();
      while (is_digit(cur())) advance();
    }
    if (cur() == 'e' || cur() == 'E') {
      real = true;
      advance();
      if (cur() == '+' || cur() == '-') advance();
      if (!is_digit(cur())) malformed_number(t, start);
      while (is_digit(cur())) advance();
    }
    if (is_ident_char(cur()) || cur() == '.') malformed_number(t, start);
    t.text = std::string(text_.substr(start, pos_ - start));
    if (real) {
      t.kind = TokKind::real;
      auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), t.real);
      if (ec != std::errc() || end != t.text.data() + t.text.size())
        fail(t.line, t.col, "real number out of range: ", quoted_text(t.text));
      return t;
    }
    t.kind = TokKind::integer;
    for (char d : t.text) {
      uint64_t digit = uint64_t(d - '0');
      if (t.magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) t.overflow = true;
      t.magnitude = t.magnitude * 10 + digit;
    }
    return t;
  }

  [[noreturn]] void malformed_number(const Token& t, size_t start) {
    while (!at_end() && (is_ident_char(cur()) || cur() == '.')) advance();
    fail(t.line, t.col, "malformed number '", quoted_text(text_.substr(start, pos_ - start)), "'");
  }

  Token lex_string(Token& t) {
    advance();  // the opening quote
    t.kind = TokKind::string;
    for (;;) {
      if (at_end() || cur() == '\n') fail(t.line, t.col, "unterminated string; expected a closing '\"' on the same line");
      char c = cur();
      if (c == '"') {
        advance();
        return t;
      }
      if (c == '\\') {
        int line = line_, col = col_;
        advance();
        if (at_end() || (cur() != '"' && cur() != '\\'))
          fail(line, col, "unknown escape in string; only \\\" and \\\\ are allowed");
        c = cur();
      }
      t.text += c;
      advance();
    }
  }

  std::string_view text_;
  const std::string& file_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
  std::deque<Token> ahead_;
};

bool is_reserved_word(std::string_view w) {
  return w == "true" || w == "false" || w == "inf" || w == "nan" || w == "return";
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& file, std::vector<std::string>* errors = nullptr)
      : lex_(text, file), errors_(errors) {}

  std::vector<std::unique_ptr<Fusion>> parse_file() {
    std::vector<std::unique_ptr<Fusion>> fusions;
    if (lex_.peek().kind == TokKind::end)
      fail(lex_.peek(), "no fusion in the file; expected 'fusion NAME(PARAMS) { ... }', found end of input");
    while (lex_.peek().kind != TokKind::end) {
      Token keyword = lex_.next();
      if (!keyword.is_word("fusion")) fail(keyword, "expected 'fusion', found ", describe(keyword));
      Token name = lex_.next();
      if (name.kind != TokKind::ident) fail(name, "expected a fusion name after 'fusion', found ", describe(name));
      for (auto& f : fusions)
        if (f->name() == name.text) fail(name, "fusion '", quoted_text(name.text), "' is already defined in this file");
      fusions.push_back(parse_fusion_body(name.text));
    }
    return fusions;
  }

 private:
  template <class... Parts>
  [[noreturn]] void fail(const Token& at, const Parts&... parts) {
    user_error(lex_.loc(at), parts...);
  }

  Token expect(char punct, std::string_view context) {
    Token t = lex_.next();
    if (!t.is(punct)) fail(t, "expected '", punct, "' ", context, ", found ", describe(t));
    return t;
  }

  // After a list item: consumes ',' and returns true when another item follows; returns false
  // at `close` (not consumed). A trailing comma before `close` is allowed.
  bool more_items(char close, std::string_view context) {
    const Token& t = lex_.peek();
    if (t.is(close)) return false;
    if (!t.is(',')) fail(t, "expected ',' or '", close, "' ", context, ", found ", describe(t));
    lex_.next();
    return !lex_.peek().is(close);
  }

  // ---- fusion, parameters, types ---------------------------------------------------------

  std::unique_ptr<Fusion> parse_fusion_body(const std::string& name) {
    auto fusion = std::make_unique<Fusion>(name);
    names_.clear();
    expect('(', "after the fusion name");
    if (!lex_.peek().is(')')) {
      do parse_param(*fusion);
      while (more_items(')', "after a parameter"));
    }
    expect(')', "after the parameters");
    expect('{', "after the parameter list");
    for (;;) {
      const Token& t = lex_.peek();
      if (t.is_word("return")) break;
      if (t.is('}'))
        fail(t, "missing return: fusion '", quoted_text(name), "' ends without 'return VALUE, ...'; expected 'return' before '}'");
      if (t.kind != TokKind::ident)
        fail(t, "expected a statement (NAME = op(...)) or 'return', found ", describe(t));
      if (!errors_) {
        parse_statement(*fusion);
        continue;
      }
      int line = t.line;
      try {
        parse_statement(*fusion);
      } catch (const UserError& e) {
        recover_from(e, line);
      }
    }
    if (!errors_) {
      parse_return(*fusion);
      return fusion;
    }
    try {
      parse_return(*fusion);
    } catch (const UserError& e) {
      recover_from(e, -1);
      while (lex_.peek().kind != TokKind::end && !lex_.peek().is('}')) lex_.next();
      if (lex_.peek().is('}')) lex_.next();
    }
    return fusion;
  }

  // Collecting errors (`alloy check`): keep the error unless it only repeats an earlier one (a
  // use of a name whose statement failed), mark the failed statement's names, and skip to the
  // next line that can start a statement. line < 0: no skipping.
  void recover_from(const UserError& e, int line) {
    if (!used_failed_name_) errors_->push_back(e.what());
    else report_undefined_in_rest(line);
    used_failed_name_ = false;
    for (auto& name : pending_names_) failed_names_.insert(name);
    pending_names_.clear();
    if (line < 0) return;
    while (lex_.peek().kind != TokKind::end) {
      const Token& t = lex_.peek();
      // the fusion's return or end, on this line too (a fusion written on one line)
      if (t.is_word("return") || t.is('}') || (t.line > line && t.kind == TokKind::ident)) break;
      lex_.next();
    }
  }

  Token expect_new_name(std::string_view what) {
    Token t = lex_.next();
    if (t.kind != TokKind::ident) fail(t, "expected ", what, ", found ", describe(t));
    if (is_reserved_word(t.text)) fail(t, "'", t.text, "' is a reserved word and cannot name a value");
    if (names_.count(t.text)) fail(t, "'", quoted_text(t.text), "' is already defined");
    return t;
  }

  void parse_param(Fusion& fusion) {
    Token name = expect_new_name("a parameter name");
    expect(':', "after parameter '" + quoted_text(name.text) + "'");
    ValueType type = parse_type(fusion);
    std::optional<Sharding> sharding;
    if (lex_.peek().is('@')) sharding = parse_sharding({type});
    Value* v = fusion.add_input(name.text, type, sharding, lex_.loc(name));
    names_[name.text] = v;
  }

  ValueType parse_type(Fusion& fusion) {
    Token dt = lex_.next();
    if (dt.kind != TokKind::ident) fail(dt, "expected a dtype (", kDTypeList, "), found ", describe(dt));
    auto dtype = parse_dtype(dt.text);
    if (!dtype)
      fail(dt, "unknown dtype '", quoted_text(dt.text), "'; expected one of ", kDTypeList, suggestion(dt.text, dtype_names()));
    ValueType type;
    type.dtype = *dtype;
    if (!lex_.peek().is('[')) {
      type.is_scalar = true;
      return type;
    }
    lex_.next();
    if (!lex_.peek().is(']')) {
      do type.shape.push_back(parse_dim(fusion));
      while (more_items(']', "after a size"));
    }
    expect(']', "after the sizes");
    return type;
  }

  Extent parse_dim(Fusion& fusion) {
    Token t = lex_.next();
    if (t.kind == TokKind::integer) return Extent::constant(to_int64(t, t, false));
    if (t.is('?')) return Extent::dynamic(fusion.next_dynamic_id());
    if (t.kind == TokKind::ident) {
      if (!is_symbol_name(t.text))
        fail(t, "'", t.text, "' cannot be a size symbol; it is a reserved word or a dtype name");
      return Extent::symbol(t.text);
    }
    if (t.is('-')) fail(t, "a size cannot be negative");
    fail(t, "expected a size (an integer, a symbol such as B, or ?), found ", describe(t));
  }

  // `@mesh[0, 1] replicated` or `@mesh[0, 1] shard(axis=k)`; the axis is checked against every
  // type in `types` (the annotated parameter, or a statement's outputs).
  Sharding parse_sharding(const std::vector<ValueType>& types) {
    expect('@', "before a mesh");
    Token mesh = lex_.next();
    if (!mesh.is_word("mesh")) fail(mesh, "expected 'mesh' after '@', found ", describe(mesh));
    expect('[', "after 'mesh'");
    Sharding sharding;
    if (!lex_.peek().is(']')) {
      do {
        Token id = lex_.next();
        if (id.kind != TokKind::integer) fail(id, "expected a device id (a non-negative integer), found ", describe(id));
        int64_t device = to_int64(id, id, false);
        if (std::find(sharding.mesh.begin(), sharding.mesh.end(), device) != sharding.mesh.end())
          fail(id, "device ", device, " appears twice in the mesh");
        sharding.mesh.push_back(device);
      } while (more_items(']', "after a device id"));
    }
    Token close = expect(']', "after the device ids");
    if (sharding.mesh.empty()) fail(close, "a mesh needs at least one device");
    Token placement = lex_.next();
    if (placement.is_word("replicated")) return sharding;
    if (!placement.is_word("shard"))
      fail(placement, "expected 'replicated' or 'shard(axis=K)' after the mesh, found ", describe(placement));
    expect('(', "after 'shard'");
    Token key = lex_.next();
    if (!key.is_word("axis")) fail(key, "expected 'axis' in shard(axis=K), found ", describe(key));
    expect('=', "after 'axis'");
    Token axis = lex_.next();
    if (axis.kind != TokKind::integer) fail(axis, "expected a shard axis (a non-negative integer), found ", describe(axis));
    int64_t k = to_int64(axis, axis, false);
    for (const ValueType& type : types)
      if (type.rank() == 0)
        fail(axis, "a ", type.is_scalar ? "scalar" : "0-dim tensor", " has no axis to shard; use 'replicated'");
      else if (k >= type.rank())
        fail(axis, "shard axis ", k, " is out of range for a value of rank ", type.rank(), "; expected 0 to ", type.rank() - 1);
    expect(')', "after the shard axis");
    sharding.shard_axis = int(k);
    return sharding;
  }

  // ---- statements ------------------------------------------------------------------------

  void parse_statement(Fusion& fusion) {
    std::vector<Token> outs;
    do {
      Token name = expect_new_name("a name to assign");
      for (auto& o : outs)
        if (o.text == name.text) fail(name, "'", quoted_text(name.text), "' is assigned twice in one statement");
      outs.push_back(name);
      pending_names_.push_back(name.text);
    } while (lex_.peek().is(',') && (lex_.next(), true));
    expect('=', outs.size() == 1 ? "after the assigned name" : "after the assigned names");
    Token op = lex_.next();
    if (op.kind != TokKind::ident) fail(op, "expected an op name after '=', found ", describe(op));
    const OpRow* row = find_op(op.text);
    if (!row) fail(op, "unknown op '", quoted_text(op.text), "'", suggestion(op.text, all_op_names()));
    expect('(', "after '" + op.text + "'");
    std::vector<Value*> inputs;
    std::vector<NamedAttr> attrs;
    parse_arguments(fusion, inputs, attrs, *row);

    std::optional<Sharding> sharding;
    std::vector<std::string> names;
    for (auto& o : outs) names.push_back(o.text);
    make_room_for(fusion, names);
    std::vector<Value*> values = fusion.add_op(row->kind, inputs, attrs, lex_.loc(op), names);
    SourceLoc annotation_loc;
    if (lex_.peek().is('@')) {
      std::vector<ValueType> types;
      for (Value* v : values) types.push_back(v->type);
      annotation_loc = lex_.loc(lex_.peek());
      sharding = parse_sharding(types);
    }
    for (Value* v : values) {
      v->sharding = sharding;
      if (sharding) v->sharding_source = {ShardingSource::Kind::user, "", annotation_loc};
      names_[v->name] = v;
    }
    pending_names_.clear();
  }

  // An op's arguments: its inputs, then NAME=VALUE attributes (an unknown or repeated name is an
  // error at the name; Fusion::add_op checks the values).
  void parse_arguments(Fusion& fusion, std::vector<Value*>& inputs, std::vector<NamedAttr>& attrs, const OpRow& row) {
    if (!lex_.peek().is(')')) {
      do {
        const Token& t = lex_.peek();
        if (t.kind == TokKind::ident && lex_.peek(1).is('=')) {
          Token key = lex_.next();
          if (std::none_of(row.attrs.begin(), row.attrs.end(), [&](const AttrSpec& spec) { return spec.name == key.text; })) {
            std::string known;
            for (const AttrSpec& spec : row.attrs) known += (known.empty() ? "" : ", ") + std::string(spec.name);
            fail(key, row.name, ": unknown attribute '", quoted_text(key.text), "'",
                 known.empty() ? std::string("; it takes none") : "; expected one of: " + known);
          }
          for (const NamedAttr& given : attrs)
            if (given.name == key.text) fail(key, row.name, ": attribute '", key.text, "' given twice");
          lex_.next();
          attrs.push_back({key.text, parse_attr_value(0)});
        } else {
          if (!attrs.empty())
            fail(t, "positional argument after the attribute '", attrs.back().name, "'; expected NAME=VALUE");
          inputs.push_back(parse_argument(fusion));
        }
      } while (more_items_args());
    }
    lex_.next();  // ')'
  }

  bool more_items_args() {
    const Token& t = lex_.peek();
    if (t.is(')')) return false;
    if (!t.is(',')) fail(t, "expected ',' or ')' after an argument, found ", describe(t));
    lex_.next();
    return !lex_.peek().is(')');
  }

  // Literal constants get internal names ("lit0"); a statement may later claim such a name, so
  // the literal steps aside (literals are printed inline, their names never appear in text).
  void make_room_for(Fusion& fusion, const std::vector<std::string>& names) {
    for (const std::string& name : names) {
      if (name.rfind("lit", 0) != 0) continue;  // only fresh_name("lit") names can be taken
      Value* taken = fusion.find_value(name);
      if (!taken) continue;
      ALLOY_CHECK(taken->literal.has_value(), "value '", name, "' exists but the parser does not know it");
      std::string fresh;
      do fresh = fusion.fresh_name("lit");
      while (std::find(names.begin(), names.end(), fresh) != names.end());
      fusion.rename_value(taken, fresh);
    }
  }

  Value* parse_argument(Fusion& fusion) {
    const Token& t = lex_.peek();
    if (t.kind == TokKind::integer || t.kind == TokKind::real || t.is('-')) return literal(fusion, parse_number());
    if (t.kind == TokKind::ident) {
      Token name = lex_.next();
      if (lex_.peek().is('('))
        fail(name, "an argument cannot be a call; assign ", quoted_text(name.text), "(...) to a name first");
      if (name.text == "true" || name.text == "false") return literal(fusion, Attr::boolean(name.text == "true"));
      if (name.text == "inf" || name.text == "nan") return literal(fusion, word_real(name, false));
      auto it = names_.find(name.text);
      if (it == names_.end()) undefined(name);
      return it->second;
    }
    if (t.is('[')) fail(t, "a list can only be an attribute value (NAME=[...]), not an argument");
    fail(t, "expected an argument (a value name or a number), found ", describe(t));
  }

  // After an error that only repeats an earlier one (a use of a name whose statement failed), the
  // rest of the statement is still read for names defined nowhere, each told once: `return c, zz`
  // and `d = add(c, zz)` tell zz. (Not an op's name, an attribute's name or value, a mesh.)
  void report_undefined_in_rest(int line) {
    static const std::set<std::string> words = {"true", "false", "inf", "nan", "replicated"};
    bool after_eq = false, after_at = false;
    try {
      while (lex_.peek().kind != TokKind::end) {
        const Token& at = lex_.peek();
        if (at.is('}') || at.is_word("return") || (line >= 0 && at.line > line && at.kind == TokKind::ident)) break;
        Token t = lex_.next();
        const Token& next = lex_.peek();
        if (t.kind == TokKind::ident && !after_eq && !after_at && !next.is('(') && !next.is('=') && !names_.count(t.text) &&
            !failed_names_.count(t.text) && !words.count(t.text)) {
          try {
            undefined(t);
          } catch (const UserError& e) {
            errors_->push_back(e.what());
          }
          failed_names_.insert(t.text);
        }
        after_eq = t.is('=');
        after_at = t.is('@');
      }
    } catch (const UserError&) {
      // (a character no token starts with: the skipping after tells it)
    }
  }

  [[noreturn]] void undefined(const Token& name) {
    if (failed_names_.count(name.text)) used_failed_name_ = true;
    std::vector<std::string> known;
    for (auto& [n, v] : names_) known.push_back(n);
    std::sort(known.begin(), known.end());
    fail(name, "undefined value '", quoted_text(name.text), "'", suggestion(name.text, known));
  }

  Value* literal(Fusion& fusion, const Attr& value) {
    Literal lit;
    if (value.kind == Attr::Kind::integer) {
      lit.kind = Literal::Kind::integer;
      lit.i = value.i;
    } else if (value.kind == Attr::Kind::boolean) {
      lit.kind = Literal::Kind::boolean;
      lit.b = value.b;
    } else {
      lit.kind = Literal::Kind::real;
      lit.f = value.f;
    }
    return fusion.add_literal(lit);
  }

  void parse_return(Fusion& fusion) {
    Token keyword = lex_.next();
    if (lex_.peek().is('}')) fail(lex_.peek(), "expected a value name after 'return', found '}'");
    do {
      Token name = lex_.next();
      if (name.kind != TokKind::ident || is_reserved_word(name.text))
        fail(name, "expected a value name to return, found ", describe(name));
      auto it = names_.find(name.text);
      if (it == names_.end()) undefined(name);
      Value* alias = nullptr;
      if (lex_.peek().kind == TokKind::punct && lex_.peek().text == "->") {
        lex_.next();
        Token target = lex_.next();
        if (target.kind != TokKind::ident || is_reserved_word(target.text))
          fail(target, "expected the name of the input to update after '->', found ", describe(target));
        auto input = names_.find(target.text);
        if (input == names_.end()) undefined(target);
        alias = input->second;
      }
      fusion.add_output(it->second, lex_.loc(name), alias);
    } while (more_items('}', "after a returned value"));
    expect('}', "after the returned values");
  }

  // ---- numbers and attribute values ------------------------------------------------------

  int64_t to_int64(const Token& start, const Token& number, bool negative) {
    uint64_t limit = negative ? kInt64Max + 1 : kInt64Max;
    if (number.overflow || number.magnitude > limit)
      fail(start, "integer out of range: ", negative ? "-" : "", quoted_text(number.text),
           " does not fit in a 64-bit signed integer");
    if (!negative) return int64_t(number.magnitude);
    return number.magnitude == kInt64Max + 1 ? std::numeric_limits<int64_t>::min() : -int64_t(number.magnitude);
  }

  Attr word_real(const Token& word, bool negative) {
    double v = word.text == "inf" ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    return Attr::real(negative ? -v : v);
  }

  // An integer or real with an optional leading '-' (also `inf`, `-inf`, `nan`).
  Attr parse_number() {
    Token start = lex_.next();
    bool negative = start.is('-');
    Token number = negative ? lex_.next() : start;
    if (number.kind == TokKind::integer) return Attr::integer(to_int64(start, number, negative));
    if (number.kind == TokKind::real) return Attr::real(negative ? -number.real : number.real);
    if (negative && (number.is_word("inf") || number.is_word("nan"))) return word_real(number, true);
    fail(number, "expected a number after '-', found ", describe(number));
  }

  Attr parse_attr_value(int depth) {
    const Token& t = lex_.peek();
    if (t.is('[')) {
      if (depth >= kMaxListDepth) fail(t, "lists are nested too deeply (more than ", kMaxListDepth, " levels)");
      lex_.next();
      Attr list;
      list.kind = Attr::Kind::list;
      if (!lex_.peek().is(']')) {
        do list.list.push_back(parse_attr_value(depth + 1));
        while (more_items(']', "in a list"));
      }
      lex_.next();
      return list;
    }
    if (t.kind == TokKind::integer || t.kind == TokKind::real || t.is('-')) return parse_number();
    Token word = lex_.next();
    if (word.kind == TokKind::string) return Attr::string(word.text);
    if (word.kind != TokKind::ident)
      fail(word, "expected an attribute value (a number, true or false, a \"string\", a dtype, a size symbol or a "
                 "[list]), found ", describe(word));
    if (word.text == "true" || word.text == "false") return Attr::boolean(word.text == "true");
    if (word.text == "inf" || word.text == "nan") return word_real(word, false);
    if (auto dtype = parse_dtype(word.text)) return Attr::dtype(*dtype);
    if (word.text == "return") fail(word, "'return' cannot be an attribute value");
    return Attr::symbol(word.text);
  }

  Lexer lex_;
  std::unordered_map<std::string, Value*> names_;  // the current fusion's values by name
  std::vector<std::string>* errors_ = nullptr;     // collect statement errors instead of stopping
  std::vector<std::string> pending_names_;         // names the statement being parsed assigns
  std::set<std::string> failed_names_;             // names whose statement failed (collecting)
  bool used_failed_name_ = false;
};

}  // namespace

bool is_value_name(std::string_view name) {
  if (name.empty() || !is_ident_start(name[0])) return false;
  if (!std::all_of(name.begin(), name.end(), is_ident_char)) return false;
  return !is_reserved_word(name);
}

bool is_symbol_name(std::string_view name) { return is_value_name(name) && !parse_dtype(name); }

std::vector<std::unique_ptr<Fusion>> parse_fusions(std::string_view text, const std::string& file_name) {
  return Parser(text, file_name).parse_file();
}

std::vector<std::string> check_fusions(std::string_view text, const std::string& file_name) {
  std::vector<std::string> errors;
  try {
    Parser(text, file_name, &errors).parse_file();
  } catch (const UserError& e) {
    errors.push_back(e.what());
  }
  return errors;
}

std::unique_ptr<Fusion> parse_fusion(std::string_view text, const std::string& file_name,
                                     std::optional<std::string> name) {
  auto fusions = parse_fusions(text, file_name);
  if (!name) return std::move(fusions.front());
  std::string known;
  for (auto& f : fusions) {
    if (f->name() == *name) return std::move(f);
    known += (known.empty() ? "" : ", ") + f->name();
  }
  user_error(SourceLoc{file_name}, "no fusion named '", *name, "'; the file defines: ", known);
}

std::unique_ptr<Fusion> parse_fusion_file(const std::string& path, std::optional<std::string> name) {
  // a .fusion file is text a person writes: 64 MiB is far beyond any, and bounds what is read
  return parse_fusion(read_regular_file(path, size_t(64) << 20, ".fusion file"), path, std::move(name));
}

}  // namespace alloy

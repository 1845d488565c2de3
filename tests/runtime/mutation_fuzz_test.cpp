// Mutation fuzzing of the whole CPU path: the example `.fusion` texts (and a few seeds that use the
// other ops) are mutated at random, seeded and deterministic; each mutant is parsed, printed and
// re-parsed, and, when it is small enough, run on the CPU with random inputs. Every outcome must be
// a success or a UserError: an InternalError, any other exception or a crash is a bug, reported
// with the mutated text.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <map>

#include "alloy/ir/op_table.h"
#include "alloy/ir/parser.h"
#include "alloy/ir/printer.h"
#include "alloy/runtime/executor.h"
#include "alloy/runtime/input_binding.h"
#include "alloy/tensor/npy.h"
#include "alloy/runtime/run_inputs.h"
#include "test_util.h"

namespace alloy {
namespace {

// The defaults keep the test deterministic and about a second long; ALLOY_FUZZ_MUTANTS and
// ALLOY_FUZZ_SEED in the environment run a longer or different search.
constexpr int kMutants = 10000;
constexpr uint64_t kSeed = 0xA110C0DEull;
// A mutant runs only when no input and no intermediate value has more elements than this.
constexpr int64_t kMaxElements = 100000;

// splitmix64: the same sequence on every platform and standard library.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : size_t(next() % n); }
  template <class T>
  const T& pick(const std::vector<T>& items) { return items[below(items.size())]; }
};

// ---- texts as tokens ------------------------------------------------------------------------

// A fusion text cut into pieces that join back into it: spaces and comments are pieces too.
enum class Kind { space, word, number, punct, string };
struct Piece {
  Kind kind;
  std::string text;
};

std::vector<Piece> split(const std::string& text) {
  std::vector<Piece> out;
  size_t i = 0;
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  while (i < text.size()) {
    size_t start = i;
    char c = text[i];
    Kind kind;
    if (c == '#' || std::isspace(static_cast<unsigned char>(c))) {
      while (i < text.size() && (text[i] == '#' || std::isspace(static_cast<unsigned char>(text[i])))) {
        if (text[i] == '#') while (i < text.size() && text[i] != '\n') ++i;
        else ++i;
      }
      kind = Kind::space;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      while (i < text.size() && (word_char(text[i]) || text[i] == '.' ||
                                 ((text[i] == '-' || text[i] == '+') && (text[i - 1] == 'e' || text[i - 1] == 'E'))))
        ++i;
      kind = Kind::number;
    } else if (word_char(c)) {
      while (i < text.size() && word_char(text[i])) ++i;
      kind = Kind::word;
    } else if (c == '"') {
      ++i;
      while (i < text.size() && text[i] != '"' && text[i] != '\n') ++i;
      if (i < text.size() && text[i] == '"') ++i;
      kind = Kind::string;
    } else {
      ++i;
      kind = Kind::punct;
    }
    out.push_back({kind, text.substr(start, i - start)});
  }
  return out;
}

std::string join(const std::vector<Piece>& pieces) {
  std::string out;
  for (const Piece& p : pieces) out += p.text;
  return out;
}

// Indexes of the pieces that satisfy `keep`.
std::vector<size_t> where(const std::vector<Piece>& pieces, const std::function<bool(const Piece&)>& keep) {
  std::vector<size_t> out;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (keep(pieces[i])) out.push_back(i);
  return out;
}

// The examples with every size of 8 or more replaced by a small one (the same size by the same
// small one, so shapes still agree), so that their mutants are small enough to run.
std::string shrink_sizes(const std::string& text) {
  std::vector<Piece> pieces = split(text);
  std::map<std::string, std::string> small;
  for (const Piece& p : pieces)
    if (p.kind == Kind::number && p.text.find_first_not_of("0123456789") == std::string::npos && p.text.size() < 10 &&
        std::stoll(p.text) >= 8)
      small.emplace(p.text, "");
  int next = 4;
  for (auto& [big, replacement] : small) replacement = std::to_string(next++);
  for (Piece& p : pieces)
    if (auto it = small.find(p.text); p.kind == Kind::number && it != small.end()) p.text = it->second;
  return join(pieces);
}

// ---- mutations ------------------------------------------------------------------------------

const std::vector<std::string> kNumbers{
    "0", "-1", "1", "2", "3", "-2", "7", "64", "100000", "4611686018427387904", "9223372036854775807",
    "9223372036854775808", "99999999999999999999", "-9223372036854775808", "1.5", "0.0", "-0.5", "1e308",
    "1e400", "1e-400", "nan", "inf", "-inf", "2.5e-1",
    // sizes and literals at the edges of the dtypes and of the size limits (issue 16)
    "4294967296", "-4294967296", "2147483648", "2147483647", "65536", "65504", "65520", "3.4e38", "3.5e38",
    "1e-45", "-0.0", "281474976710656", "281474976710657", "16777217"};
const std::vector<std::string> kAttrValues{
    "[]", "[0]", "[-1]", "[0, 0]", "[1, 0]", "[2, 1, 0]", "[-1, -1]", "[9223372036854775807]", "[B]", "[B, -1]",
    "[[1]]", "[1.5]", "[true]", "0", "-1", "2", "-7", "100", "true", "false", "\"tanh\"", "\"none\"", "\"bogus\"",
    "\"\"", "f16", "bool", "i32", "i64", "1.5", "-1.0e-5", "nan", "inf", "B", "?", "[0, 1, 2, 3, 4, 5, 6, 7, 8]",
    "[-9223372036854775808]", "[4611686018427387904, 4]"};
const std::vector<std::string> kDTypes{"f64", "f32", "f16", "bf16", "i64", "i32", "bool", "f8", "u8"};
const std::vector<std::string> kInserts{
    ",", "(", ")", "[", "]", "{", "}", "=", ":", "?", "-", "@", "1", "x", "B", "return", "fusion", "lit0", "t0",
    "@mesh[0, 1] shard(axis=0)", "@mesh[0] replicated", "dims=[0]", "keepdim=true", "1.0", "\"", "#", "\n",
    "y = add(x, x)\n", "q = sum(x)\n", "return x\n", "}\nfusion g(a: f32[2]) {\n",
    // shapes at the size limits: empty, enormous, and of more axes than a tensor has
    "f32[0, 4]", "f32[4294967296, 4294967296]", "bf16[281474976710656]",
    "f32[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
    "1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]",
    "y = expand(x, shape=[4294967296, 4294967296])\n", "y = add(x, 99999999999)\n", "y = pow(x, -1)\n"};
const std::string kChars = "()[]{},:=@?-#\"._ aZ09\n\t\\";

bool is_op_name(const Piece& p) { return p.kind == Kind::word && find_op(p.text) != nullptr; }
bool is_dtype(const Piece& p) { return p.kind == Kind::word && parse_dtype(p.text).has_value(); }
bool is_token(const Piece& p) { return p.kind != Kind::space; }

// The value pieces of attribute `KEY=VALUE` that starts at piece `key`: [begin, end).
std::pair<size_t, size_t> attr_value_span(const std::vector<Piece>& pieces, size_t key) {
  size_t i = key + 1;
  while (i < pieces.size() && pieces[i].kind == Kind::space) ++i;
  size_t begin = i + 1, end = begin;  // after '='
  int depth = 0;
  for (; end < pieces.size(); ++end) {
    const std::string& t = pieces[end].text;
    if (t == "[") ++depth;
    else if (t == "]") --depth;
    else if (depth <= 0 && (t == "," || t == ")")) break;
    if (depth < 0) break;
  }
  return {begin, end};
}

std::vector<size_t> attribute_keys(const std::vector<Piece>& pieces) {
  std::vector<size_t> keys;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].kind != Kind::word) continue;
    size_t j = i + 1;
    while (j < pieces.size() && pieces[j].kind == Kind::space) ++j;
    if (j < pieces.size() && pieces[j].text == "=" && i > 0) {
      size_t k = i - 1;
      while (k > 0 && pieces[k].kind == Kind::space) --k;
      if (pieces[k].text == "," || pieces[k].text == "(") keys.push_back(i);
    }
  }
  return keys;
}

enum class Mutation {
  delete_token, duplicate_token, swap_tokens,
  characters,     // see mutate_characters
  number,         // 0, -1, huge, out of range, reals, nan
  op_name,        // another op of the table
  dtype,          // another dtype, or no dtype at all
  attribute,      // another attribute value: lists, negative axes, strings, dtypes, symbols
  name,           // another name of the same text in place of one
  symbolic_size,  // a number becomes a symbol or `?`
  insert,         // a token or a line from a small vocabulary
};

// Character edits: delete, duplicate, swap or replace one character, or drop a line.
std::string mutate_characters(std::string s, Rng& rng) {
  size_t at = rng.below(s.size());
  switch (rng.below(5)) {
    case 0: return s.erase(at, 1);
    case 1: return s.insert(at, 1, s[at]);
    case 2:
      if (at + 1 < s.size()) std::swap(s[at], s[at + 1]);
      return s;
    case 3:
      s[at] = rng.below(8) ? kChars[rng.below(kChars.size())] : char(rng.below(256));
      return s;
    default: {
      size_t begin = s.rfind('\n', at);
      begin = begin == std::string::npos ? 0 : begin + 1;
      size_t end = s.find('\n', at);
      return s.erase(begin, end == std::string::npos ? std::string::npos : end - begin + 1);
    }
  }
}

std::string mutate_once(const std::string& text, Rng& rng) {
  std::vector<Piece> pieces = split(text);
  std::vector<size_t> tokens = where(pieces, is_token);
  if (tokens.empty() || text.empty()) return text + rng.pick(kInserts);
  // Most mutations keep the text well-formed (numbers, op names, dtypes, attribute values, names),
  // so that many mutants get past the parser into shape inference and the run.
  using enum Mutation;
  static const Mutation kMix[] = {delete_token, duplicate_token, swap_tokens, characters, characters, characters,
                                  characters, number, number, number, op_name, op_name, op_name, dtype, dtype,
                                  attribute, attribute, attribute, attribute, insert, name, name, name,
                                  symbolic_size, symbolic_size};
  switch (kMix[rng.below(std::size(kMix))]) {
    case delete_token: pieces.erase(pieces.begin() + long(rng.pick(tokens))); break;
    case duplicate_token: {
      size_t at = rng.pick(tokens);
      pieces.insert(pieces.begin() + long(at), {Piece{Kind::space, " "}, pieces[at]});
      break;
    }
    case swap_tokens: std::swap(pieces[rng.pick(tokens)].text, pieces[rng.pick(tokens)].text); break;
    case characters: return mutate_characters(text, rng);
    case number: {
      std::vector<size_t> numbers = where(pieces, [](const Piece& p) { return p.kind == Kind::number; });
      if (numbers.empty()) return mutate_once(text, rng);
      pieces[rng.pick(numbers)].text = rng.pick(kNumbers);
      break;
    }
    case op_name: {
      std::vector<size_t> ops = where(pieces, is_op_name);
      if (ops.empty()) return mutate_once(text, rng);
      std::vector<std::string_view> names = all_op_names();
      pieces[rng.pick(ops)].text = std::string(rng.pick(names));
      break;
    }
    case dtype: {
      std::vector<size_t> dtypes = where(pieces, is_dtype);
      if (dtypes.empty()) return mutate_once(text, rng);
      pieces[rng.pick(dtypes)].text = rng.pick(kDTypes);
      break;
    }
    case attribute: {
      std::vector<size_t> keys = attribute_keys(pieces);
      if (keys.empty()) return mutate_once(text, rng);
      auto [begin, end] = attr_value_span(pieces, rng.pick(keys));
      if (begin > pieces.size()) return mutate_once(text, rng);
      pieces.erase(pieces.begin() + long(begin), pieces.begin() + long(std::min(end, pieces.size())));
      pieces.insert(pieces.begin() + long(begin), Piece{Kind::word, rng.pick(kAttrValues)});
      break;
    }
    case name: {  // one name for another of the same text: other operands, other sizes
      std::vector<size_t> words = where(pieces, [](const Piece& p) { return p.kind == Kind::word; });
      if (words.empty()) return mutate_once(text, rng);
      pieces[rng.pick(words)].text = pieces[rng.pick(words)].text;
      break;
    }
    case symbolic_size: {
      std::vector<size_t> numbers = where(pieces, [](const Piece& p) { return p.kind == Kind::number; });
      if (numbers.empty()) return mutate_once(text, rng);
      pieces[rng.pick(numbers)].text = rng.pick(std::vector<std::string>{"?", "B", "S", "T", "N"});
      break;
    }
    case insert: {
      size_t at = rng.pick(tokens);
      pieces.insert(pieces.begin() + long(at), Piece{Kind::word, rng.pick(kInserts) + " "});
      break;
    }
  }
  return join(pieces);
}

// ---- seeds ----------------------------------------------------------------------------------

// Seeds for the ops the examples do not use.
const char* const kShapeSeed = R"(fusion shapes(x: f32[B, 4, 6], y: f32[6, 4], k: i32[B, 4], s: f32) {
  t = permute(x, dims=[0, 2, 1])
  r = reshape(t, shape=[B, -1])
  u = unsqueeze(r, dim=1)
  q = squeeze(u, dims=[1])
  sl = slice(x, starts=[0, 1, 0], ends=[2, 3, 6], steps=[1, 1, 2])
  c = cat(sl, sl, dim=1)
  m = matmul(x, y)
  lin = linear(m, y)
  e = expand(y, shape=[2, 6, 4])
  pos = gt(x, 0.0)
  w = where(pos, x, s)
  kf = cast(k, dtype=f32)
  p = pow(kf, 2)
  mn = minimum(p, 3)
  d = div(k, 2)
  return q, c, e, w, mn, d, lin
}
)";

const char* const kPointwiseSeed = R"(fusion activations(x: bf16[3, 5], g: bf16[3, 5], b: f16[5]) {
  a = silu(x)
  s = sigmoid(a)
  e = erf(s)
  r = relu(e)
  n = neg(r)
  ab = abs(n)
  l = log(ab)
  q = sqrt(ab)
  rc = reciprocal(q)
  ge = gelu(x, approximate="none")
  gb = gelu_backward(g, x, approximate="tanh")
  rb = relu_backward(g, x)
  h = add(x, b)
  v, mu = var_mean(h, dims=[1], correction=1, keepdim=true)
  mx = maximum(v, mu)
  eqv = eq(mx, mu)
  ss = segment_set(mx)
  mm = mean(h, dims=[0, 1])
  return rc, ge, gb, rb, eqv, ss, l, mm
}
)";

std::vector<std::string> seed_texts(std::vector<std::string>& full_size) {
  std::vector<std::string> small{kShapeSeed, kPointwiseSeed};
  for (auto& entry : std::filesystem::directory_iterator(testing::source_path("examples"))) {
    if (entry.path().extension() != ".fusion") continue;
    // A sharded example runs here on a mesh of one device (this is a job of one process), so its
    // mutants exercise the sharding passes instead of all stopping at "launch 2 processes".
    std::string text = testing::read_file(entry.path().string());
    for (size_t at = text.find("@mesh[0, 1]"); at != std::string::npos; at = text.find("@mesh[0, 1]", at))
      text.replace(at, 11, "@mesh[0]");
    full_size.push_back(text);
  }
  std::sort(full_size.begin(), full_size.end());
  for (const std::string& text : full_size) small.push_back(shrink_sizes(text));
  return small;
}

// ---- running one mutant ---------------------------------------------------------------------

struct Tally {
  int parse_errors = 0, too_large = 0, ran = 0, run_errors = 0;
  // Run-time errors raised by a kernel after bind_inputs accepted the inputs: shape inference let
  // through a program the kernels refuse. Counted, not failed: still a UserError.
  int kernel_errors = 0;
};

// ALLOY_FUZZ_VERBOSE=1 prints every kernel-level rejection with its mutant.
bool verbose() {
  static const bool on = std::getenv("ALLOY_FUZZ_VERBOSE") != nullptr;
  return on;
}

int64_t elements(const std::vector<Extent>& shape, const Bindings& sizes) {
  int64_t n = 1;
  for (const Extent& e : shape) {
    auto v = e.evaluate(sizes);
    if (!v || *v < 0) return 0;  // the run reports it
    if (__builtin_mul_overflow(n, *v, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

// Round-trips one parsed fusion through the printer and runs it; throws what the library throws.
void run_fusion(std::unique_ptr<Fusion> fusion, uint64_t seed, const std::string& mutant, Tally& tally) {
  std::string printed = print_fusion(*fusion), reprinted;
  try {
    reprinted = print_fusion(*parse_fusion(printed, "printed.fusion"));
  } catch (const UserError& e) {
    ADD_FAILURE() << "the print of a parsed fusion does not parse: " << e.what() << "\n--- print ---\n" << printed
                  << "--- mutated text ---\n" << mutant;
    return;
  }
  if (printed != reprinted)
    ADD_FAILURE() << "print, parse, print changes the text:\n" << printed << "--- printed again ---\n" << reprinted
                  << "--- mutated text ---\n" << mutant;

  Bindings sizes;
  Rng rng{seed};
  for (const std::string& symbol : fusion->input_symbols()) sizes[symbol] = int64_t(2 + rng.below(2));
  for (Value* in : fusion->inputs())
    if (elements(in->shape(), sizes) > kMaxElements) return void(++tally.too_large);
  Bindings all = sizes;
  try {
    fusion->complete_bindings(all);
  } catch (const UserError&) {
    all.clear();  // the executor reports it
  }
  for (auto& v : fusion->values())
    if (elements(v->shape(), all) > kMaxElements) return void(++tally.too_large);

  std::vector<Tensor> inputs = complete_inputs(*fusion, std::vector<Tensor>(fusion->inputs().size()), sizes, seed);
  FusionExecutor executor(std::move(fusion), {DeviceChoice::cpu});
  std::vector<Tensor> outputs;
  try {
    outputs = executor.run(inputs);
  } catch (const UserError& e) {
    ++tally.run_errors;
    try {
      bind_inputs(executor.fusion(), inputs);
    } catch (const UserError&) {
      return;  // the inputs or sizes were rejected, as they should be
    }
    ++tally.kernel_errors;
    if (verbose()) std::cout << "[ kernel   ] " << e.what() << "\n" << mutant << "\n";
    return;
  }
  ++tally.ran;
  const Fusion& f = executor.fusion();
  ASSERT_EQ(outputs.size(), f.outputs().size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::vector<int64_t> declared;
    for (const Extent& e : f.outputs()[i]->shape()) declared.push_back(e.evaluate(all).value_or(-1));
    EXPECT_EQ(outputs[i].sizes(), declared) << "output " << i << " of\n" << mutant;
    EXPECT_EQ(outputs[i].dtype(), f.outputs()[i]->dtype()) << "output " << i << " of\n" << mutant;
  }
}

// A crash in the library prints the mutant before the process dies.
const std::string* g_current_text = nullptr;

void print_mutant_and_die(int signal) {
  static const char header[] = "\n*** fatal signal while checking this mutated .fusion text:\n";
  if (g_current_text) {
    ssize_t ignored = write(2, header, sizeof header - 1);
    ignored = write(2, g_current_text->data(), g_current_text->size());
    (void)ignored;
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

struct CrashReporter {
  std::vector<std::pair<int, void (*)(int)>> previous;
  CrashReporter() {
    for (int s : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) previous.emplace_back(s, std::signal(s, print_mutant_and_die));
  }
  ~CrashReporter() {
    for (auto& [s, handler] : previous) std::signal(s, handler);
    g_current_text = nullptr;
  }
};

TEST(MutationFuzz, EveryMutantOfTheExamples_ParsesAndRunsOrIsAUserError) {
  std::vector<std::string> full_size;
  std::vector<std::string> seeds = seed_texts(full_size);
  ASSERT_GE(full_size.size(), 5u);
  const char* count_env = std::getenv("ALLOY_FUZZ_MUTANTS");
  const char* seed_env = std::getenv("ALLOY_FUZZ_SEED");
  const int mutants = count_env ? std::atoi(count_env) : kMutants;
  Rng rng{seed_env ? std::strtoull(seed_env, nullptr, 0) : kSeed};
  Tally tally;
  int bugs = 0;
  CrashReporter crash_reporter;
  for (int m = 0; m < mutants; ++m) {
    // A quarter of the mutants start from the full-size examples: they exercise the parser.
    std::string text = rng.below(4) == 0 ? rng.pick(full_size) : rng.pick(seeds);
    for (size_t k = 0, n = 1 + rng.below(4) / 2; k < n; ++k) text = mutate_once(text, rng);
    g_current_text = &text;
    uint64_t run_seed = rng.next();
    try {
      std::vector<std::unique_ptr<Fusion>> fusions;
      try {
        fusions = parse_fusions(text, "mutant.fusion");
      } catch (const UserError&) {
        ++tally.parse_errors;
        continue;
      }
      for (auto& fusion : fusions) run_fusion(std::move(fusion), run_seed, text, tally);
    } catch (const UserError&) {
      ++tally.run_errors;
    } catch (const InternalError& e) {
      if (bugs++ < 10) ADD_FAILURE() << "mutant " << m << ": " << e.what() << "\n--- mutated text ---\n" << text;
    } catch (const std::exception& e) {
      if (bugs++ < 10) ADD_FAILURE() << "mutant " << m << ": std::exception: " << e.what() << "\n--- mutated text ---\n" << text;
    }
    if (::testing::Test::HasFatalFailure()) break;
  }
  EXPECT_EQ(bugs, 0) << "mutants that raised something other than a UserError (the first 10 are shown above)";
  std::cout << "[ fuzz     ] " << mutants << " mutants: " << tally.parse_errors << " rejected by the parser, "
            << tally.ran << " ran, " << tally.run_errors << " rejected at run time (" << tally.kernel_errors
            << " of them by a kernel after the inputs were accepted), " << tally.too_large << " too large to run\n";
  // The test means something only when many mutants get past the parser and run (about one in
  // ten does; the vocabulary of limits and malformed shapes makes many of the rest parse errors).
  EXPECT_GT(tally.ran, mutants / 12);
}

// .npy files mutated byte by byte and in their header (issue 16, family 3): each is read as an
// input of its dtype, or refused with a UserError; never an internal error, a crash, or a read
// past the file's end.
TEST(MutationFuzz, EveryMutantOfAnNpyFile_ReadsOrIsAUserError) {
  Rng rng{kSeed + 1};
  std::vector<std::string> seeds;
  for (DType t : {DType::f32, DType::bf16, DType::i64, DType::boolean, DType::f64}) {
    Tensor x = Tensor::empty(t, {3, 5});
    std::memset(x.data(), 1, size_t(x.numel()) * size_t(dtype_size(t)));
    seeds.push_back(encode_npy(x));
  }
  const std::vector<std::string> header_values{
      "'<f4'", "'>f4'", "'|b1'", "'<f2'", "'<u2'", "'<c8'", "'<V4'", "'O'", "'<i8'", "''", "'<f4", "(3, 5)", "(5, 3)", "()",
      "(0,)", "(3, 0)", "(-1, 5)", "(4294967296, 4294967296)", "(281474976710657,)", "(3, 5, 1, 1)", "True", "False", "None",
      "{}", "(3,, 5)", "(99999999999999999999,)", "'fortran_order'"};
  int bugs = 0, read = 0, refused = 0;
  for (int m = 0; m < 4000; ++m) {
    std::string bytes = rng.pick(seeds);
    for (size_t k = 0, n = 1 + rng.below(3); k < n; ++k) {
      size_t header_end = std::min(bytes.size(), bytes.find('\n') == std::string::npos ? bytes.size() : bytes.find('\n') + 1);
      switch (rng.below(6)) {
        case 0: bytes.resize(rng.below(bytes.size() + 1)); break;                          // truncated anywhere
        case 1: if (!bytes.empty()) bytes[rng.below(bytes.size())] = char(rng.next()); break;  // one byte
        case 2: if (header_end > 10) bytes[10 + rng.below(header_end - 10)] = char(rng.next()); break;  // a header byte
        case 3: {  // a header value replaced: the dtype, the shape, the order
          for (const char* key : {"'descr': ", "'shape': ", "'fortran_order': "}) {
            size_t at = bytes.find(key);
            if (at == std::string::npos || rng.below(2)) continue;
            at += std::strlen(key);
            size_t end = bytes.find_first_of(",}", bytes[at] == '(' ? bytes.find(')', at) : at);
            if (end == std::string::npos || end > header_end) continue;
            bytes.replace(at, end - at + (bytes[at] == '(' ? 1 : 0), rng.pick(header_values));
          }
          break;
        }
        case 4: bytes.insert(rng.below(bytes.size() + 1), std::string(1 + rng.below(70), char(rng.next()))); break;
        case 5: if (bytes.size() > 9) bytes[8 + rng.below(2)] = char(rng.below(4)); break;  // the version and header length
      }
    }
    try {
      Tensor t = parse_npy(bytes, "mutant.npy");
      ++read;
      // what was read is whole: its bytes are inside the file
      ASSERT_LE(int64_t(t.numel()) * int64_t(dtype_size(t.dtype())), int64_t(bytes.size())) << "mutant " << m;
    } catch (const UserError&) {
      ++refused;
    } catch (const std::exception& e) {
      if (bugs++ < 10) ADD_FAILURE() << "npy mutant " << m << ": " << e.what();
    }
  }
  EXPECT_EQ(bugs, 0);
  EXPECT_GT(read, 100);
  EXPECT_GT(refused, 100);
  std::cout << "[ fuzz     ] 4000 .npy mutants: " << read << " read, " << refused << " refused\n";
}

}  // namespace
}  // namespace alloy

#include "alloy/multidevice/agreement.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>

#include "alloy/common/error.h"
#include "alloy/multidevice/communicator.h"

namespace alloy::multidevice {
namespace {

constexpr uint32_t kLeft = 2;  // AgreementRecord::failed of a rank that left the job (leave_job)

uint64_t fnv1a(std::string_view text, uint64_t h) {
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::atomic<bool> agreed_failure{false};
// The last agreed failure's message on this rank and the rank that tells it (agreed_failure_teller)
std::mutex told_mutex;
std::string told_message;
int told_by = -1;
// A rank of the job left (its record said so): it is gone, so no collective of the job completes
// now; set where an agreement saw it (the name of the first such rank, for later runs' errors,
// and the rank that tells them: the lowest rank still there)
std::string left_rank;
int left_teller = -1;

// Marks the failure this rank is about to throw as agreed, told by rank `teller`.
void note_agreed(const std::string& message, int teller) {
  agreed_failure.store(true);
  std::lock_guard<std::mutex> lock(told_mutex);
  told_message = message;
  told_by = teller;
}

std::string message_of(std::exception_ptr failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return {};
  }
}

// The verdict on every rank's record that every agreement reaches first, the same on every rank:
// a rank that failed or left (its own error there, a PeerError elsewhere; the lowest failed rank
// tells it), then ranks of different agreement options (a UserError on every rank).
void failures_and_options(const std::vector<AgreementRecord>& all, std::exception_ptr failure, const std::string& what,
                          const std::function<std::string(int)>& name_rank) {
  const int ranks = int(all.size());
  auto name = [&](int r) { return name_rank ? name_rank(r) : "rank " + std::to_string(r) + " of the job"; };
  // a rank that left tells nothing (the lowest rank still here tells it), and no later gather
  // completes (noted whichever rank's failure is told)
  int still_here = 0;
  while (still_here < ranks && all[size_t(still_here)].failed == kLeft) ++still_here;
  for (int r = 0; r < ranks; ++r)
    if (all[size_t(r)].failed == kLeft) {
      std::lock_guard<std::mutex> lock(told_mutex);
      left_rank = name(r);
      left_teller = still_here;
      break;
    }
  for (int r = 0; r < ranks; ++r)
    if (all[size_t(r)].failed) {
      const int teller = all[size_t(r)].failed == kLeft ? still_here : r;
      if (failure) {
        note_agreed(message_of(failure), teller);
        std::rethrow_exception(failure);
      }
      PeerError peer(what + ": " + name(r) +
                     (all[size_t(r)].failed == kLeft ? " left the job (its script ended) before this run" : " failed before communicating"));
      note_agreed(peer.what(), teller);
      throw peer;
    }
  for (int r = 1; r < ranks; ++r)
    if (all[size_t(r)].on_change != all[0].on_change) {
      auto option = [](const AgreementRecord& rec) { return rec.on_change ? "on_change" : "every_run"; };
      UserError error(what + ": the ranks of the job disagree on the agreement option: rank " + std::to_string(r) + " has " +
                      option(all[size_t(r)]) + ", rank 0 " + option(all[0]) + " (every rank must run with the same options)");
      note_agreed(error.what(), 0);
      throw error;
    }
}

size_t slot_of(size_t fact) { return std::min(fact, size_t(AgreementRecord::slots - 1)); }

// The facts of one slot as lines ("name\tvalue"), what the error path gathers to name them.
std::string slot_text(const std::vector<JobFact>& facts, size_t slot) {
  std::string out;
  for (size_t i = 0; i < facts.size(); ++i)
    if (slot_of(i) == slot) out += facts[i].name + '\t' + facts[i].value + '\n';
  return out;
}

// The first fact (of those lines) that differs between two ranks' texts: {name, value a, value b}.
std::array<std::string, 3> first_difference(std::string_view a, std::string_view b) {
  auto next = [](std::string_view& text) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    return line;
  };
  auto split = [](std::string_view line) -> std::pair<std::string, std::string> {
    size_t tab = line.find('\t');
    if (tab == std::string_view::npos) return {"", std::string(line)};
    return {std::string(line.substr(0, tab)), std::string(line.substr(tab + 1))};
  };
  while (!a.empty() || !b.empty()) {
    auto [na, va] = split(next(a));
    auto [nb, vb] = split(next(b));
    if (na != nb) return {"facts", na.empty() ? "none" : na + " " + va, nb.empty() ? "none" : nb + " " + vb};
    if (va != vb) return {na, va, vb};
  }
  return {"facts", "(the same text: a hash collision)", "(the same text)"};
}

// Every rank's `detail` of the fact named `name` (empty where a rank has none): two all-gathers
// over the job, its length and then the texts. Every rank calls it together (the error path).
std::vector<std::string> gather_details(const std::vector<JobFact>& facts, const std::string& name, int ranks) {
  std::string mine;
  for (const JobFact& f : facts)
    if (f.name == name) mine = f.detail;
  constexpr uint64_t kMaxDetail = 1 << 20;  // a longer text is cut (the message names a line of it)
  uint64_t length = std::min<uint64_t>(mine.size(), kMaxDetail);
  std::vector<uint64_t> lengths(static_cast<size_t>(ranks));
  job_all_gather(&length, sizeof length, lengths.data());
  uint64_t longest = (*std::max_element(lengths.begin(), lengths.end()) + 7) / 8 * 8;
  std::vector<std::string> out(static_cast<size_t>(ranks));
  if (longest == 0) return out;
  std::vector<char> own(longest, '\0'), all(longest * size_t(ranks));
  std::memcpy(own.data(), mine.data(), length);
  job_all_gather(own.data(), longest, all.data());
  for (int r = 0; r < ranks; ++r) out[size_t(r)].assign(all.data() + size_t(r) * longest, lengths[size_t(r)]);
  return out;
}

// A printed line without the spaces that align its comment (`# f32[T, 8]`): a longer statement
// elsewhere moves every comment's column, which is no difference of the line's own.
std::string without_comment_padding(const std::string& line) {
  size_t hash = line.find(" #");
  if (hash == std::string::npos) return line;
  size_t start = line.find_last_not_of(' ', hash);
  return line.substr(0, start == std::string::npos ? 0 : start + 1) + " " + line.substr(hash + 1);
}

// " (first different at line N: rank A has `...`, rank B `...`)" for two texts, or "".
std::string first_different_line(const std::string& a, int rank_a, const std::string& b, int rank_b) {
  if (a.empty() || b.empty() || a == b) return "";
  size_t pa = 0, pb = 0;
  for (int line = 1;; ++line) {
    size_t ea = std::min(a.find('\n', pa), a.size()), eb = std::min(b.find('\n', pb), b.size());
    std::string la = a.substr(pa, ea - pa), lb = b.substr(pb, eb - pb);
    if (without_comment_padding(la) != without_comment_padding(lb) || ea == a.size() || eb == b.size()) {
      auto quoted = [](const std::string& l) { return l.empty() ? std::string("nothing") : "`" + l + "`"; };
      return " (first different at line " + std::to_string(line) + ": rank " + std::to_string(rank_a) + " has " + quoted(la) +
             ", rank " + std::to_string(rank_b) + " " + quoted(lb) + ")";
    }
    pa = ea + 1;
    pb = eb + 1;
  }
}

// Where two ranks' records differ: the slot, and the ranks (the first that counts there, and the
// first that differs from it).
struct Difference {
  size_t slot;
  int reference, other;
};

// The first slot where two ranks that count there differ (a rank outside the mesh skips the slots
// its own record marks mesh-only): every rank reads the same records, so every rank finds the same
// slot, or none. The slots' hashes first: ranks with more facts than others (a fusion of more
// inputs) differ at the first slot of a fact the others lack, or earlier (the fusion's); then the
// counts alone (the same hashes of a different count: a collision).
std::optional<Difference> first_differing_slot(const std::vector<AgreementRecord>& all) {
  for (size_t pass = 0, k = 0; pass < 2; k = (k + 1) % size_t(AgreementRecord::slots), pass += k == 0) {
    int reference = -1;
    for (int r = 0; r < int(all.size()); ++r) {
      const AgreementRecord& rec = all[size_t(r)];
      if (!rec.in_mesh && (rec.mesh_only_slots >> k & 1u)) continue;
      if (reference < 0) reference = r;
      else if (rec.hash[k] != all[size_t(reference)].hash[k] || (pass == 1 && rec.facts != all[size_t(reference)].facts))
        return Difference{k, reference, r};
    }
  }
  return std::nullopt;
}

// Where a rank already left the job: this run's error (this rank's own `failure` where it has
// one), without communicating, told by the rank that told the leaving.
void refuse_if_a_rank_left(std::exception_ptr failure, const std::string& what) {
  std::string left;
  int teller = -1;
  {
    std::lock_guard<std::mutex> lock(told_mutex);
    left = left_rank;
    teller = left_teller;
  }
  if (left.empty()) return;
  if (failure) {
    note_agreed(message_of(failure), teller);
    std::rethrow_exception(failure);
  }
  PeerError peer(what + ": " + left + " left the job (its script ended) before this run");
  note_agreed(peer.what(), teller);
  throw peer;
}

}  // namespace

AgreementRecord make_record(const std::vector<JobFact>& facts, bool in_mesh) {
  AgreementRecord record;
  record.in_mesh = in_mesh ? 1 : 0;
  record.facts = uint32_t(facts.size());
  for (auto& h : record.hash) h = 14695981039346656037ull;
  for (size_t i = 0; i < facts.size(); ++i) {
    uint64_t& h = record.hash[slot_of(i)];
    h = fnv1a(facts[i].value, fnv1a(std::string_view("\t", 1), fnv1a(facts[i].name, h)));
    if (facts[i].mesh_only) record.mesh_only_slots |= 1u << slot_of(i);
  }
  return record;
}

bool any_rank(bool mine) {
  const ProcessInfo& p = process();
  if (p.size == 1) return mine;
  uint64_t word = mine ? 1 : 0;
  std::vector<uint64_t> all(size_t(p.size));
  job_all_gather(&word, sizeof word, all.data());
  return std::any_of(all.begin(), all.end(), [](uint64_t w) { return w != 0; });
}

int leave_job(bool untold) {
  if (!in_mpi_job_of_several()) return -2;
  {
    std::lock_guard<std::mutex> lock(told_mutex);
    if (!left_rank.empty()) return -2;  // (a rank that left already waits in its MPI_Finalize: no gather completes)
  }
  AgreementRecord mine = make_record({}, false);
  mine.failed = kLeft;
  mine.changed = untold ? 1 : 0;  // (in a record that leaves: an agreed error this rank has not printed)
  {
    std::lock_guard<std::mutex> lock(told_mutex);
    mine.tells = untold && told_by == process().rank ? 1 : 0;
  }
  std::vector<AgreementRecord> all(size_t(process().size));
  try {
    job_all_gather(&mine, sizeof mine, all.data());
  } catch (...) {  // (leaving anyway)
    return -2;
  }
  auto untold_at = [&](int r) { return all[size_t(r)].failed == kLeft && all[size_t(r)].changed; };
  for (int r = 0; r < int(all.size()); ++r)
    if (untold_at(r) && all[size_t(r)].tells) return r;
  for (int r = 0; r < int(all.size()); ++r)
    if (untold_at(r)) return r;
  return -1;
}

void agree_with_job(const std::vector<JobFact>& facts, bool in_mesh, std::exception_ptr failure, const std::string& what,
                    const std::function<std::string(int)>& name_rank) {
  const ProcessInfo& p = process();
  if (p.size == 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  static_assert(sizeof(AgreementRecord) % 8 == 0);
  refuse_if_a_rank_left(failure, what);
  AgreementRecord mine = make_record(facts, in_mesh);
  mine.failed = failure ? 1 : 0;
  std::vector<AgreementRecord> all(size_t(p.size));
  job_all_gather(&mine, sizeof mine, all.data());
  // 1. a rank that failed (or left): its own error there, a PeerError elsewhere; ranks of another
  // agreement option
  failures_and_options(all, failure, what, name_rank);
  // 2. the first slot where two ranks that count there differ (first_differing_slot)
  if (std::optional<Difference> d = first_differing_slot(all)) {
    const size_t k = d->slot;
    const int reference = d->reference, other = d->other;
    // the error path: one more all-gather, of the slot's facts in words (every rank is here)
    constexpr size_t text_bytes = 1024;
    std::vector<char> text(text_bytes, '\0'), texts(text_bytes * size_t(p.size));
    std::string own = slot_text(facts, k);
    std::memcpy(text.data(), own.data(), std::min(own.size(), text_bytes - 1));
    job_all_gather(text.data(), text_bytes, texts.data());
    auto text_of = [&](int r) { return std::string_view(texts.data() + size_t(r) * text_bytes); };
    auto [name, value_other, value_reference] = first_difference(text_of(other), text_of(reference));
    // every rank found the same fact (from the same gathered texts): all gather its details or none
    std::string where;
    if (name == "fusion") {
      std::vector<std::string> details = gather_details(facts, name, p.size);
      where = first_different_line(details[size_t(other)], other, details[size_t(reference)], reference);
    }
    UserError error(what + ": the ranks of the job disagree on the " + name + ": rank " + std::to_string(other) + " has " + value_other +
                    ", rank " + std::to_string(reference) + " " + value_reference + where +
                    " (every rank must run the same fusion with the same options and inputs of the same local shapes)");
    note_agreed(error.what(), 0);
    throw error;
  }
}

bool agree_on_change(const AgreementRecord& record, bool changed, std::exception_ptr failure, const std::string& what,
                     const std::function<std::string(int)>& name_rank) {
  const ProcessInfo& p = process();
  if (p.size == 1) {
    if (failure) std::rethrow_exception(failure);
    return changed;
  }
  refuse_if_a_rank_left(failure, what);
  AgreementRecord mine = record;
  mine.on_change = 1;
  mine.changed = changed ? 1 : 0;
  mine.failed = failure ? 1 : 0;
  std::vector<AgreementRecord> all(size_t(p.size));
  job_all_gather(&mine, sizeof mine, all.data());
  failures_and_options(all, failure, what, name_rank);
  // a record that changed, or records that differ between ranks (each unchanged since its own
  // last agreement: a rank running another definition, or one agreed at other sizes): agreed on
  // in full, where the difference is named
  return std::any_of(all.begin(), all.end(), [](const AgreementRecord& r) { return r.changed != 0; }) || first_differing_slot(all).has_value();
}

bool failure_agreed() { return agreed_failure.load(); }

int agreed_failure_teller(const std::string& message) {
  if (!agreed_failure.load()) return -1;
  std::lock_guard<std::mutex> lock(told_mutex);
  return message == told_message ? told_by : -1;
}

}  // namespace alloy::multidevice

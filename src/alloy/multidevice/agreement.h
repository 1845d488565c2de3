// The job-wide agreement (issue 26): before the first collective of a run, every rank of the job
// contributes a small fixed-size record (hashes of the facts that must be the same on every rank:
// the fusion, the options, the command line's choices, the bound sizes, each input's local shape,
// dtype and strides class) and whether it failed to make it; one all-gather over the job's host
// team gives every rank every record, so every rank reaches the same verdict at once: a rank that
// failed rethrows its error and the others throw PeerError; facts that differ are a UserError on
// every rank naming the first fact that differs and two ranks that differ ("rank 1 bound T=16,
// rank 0 T=8"). Ranks outside the mesh take part (their mesh-only facts are not compared).
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace alloy::multidevice {

// One fact a rank states: `name` as the message says it ("bound", "input 'x'", "fusion"), its value
// in words. A mesh-only fact (bound sizes, local shapes) is compared among the mesh's ranks only.
struct JobFact {
  std::string name;
  std::string value;
  bool mesh_only = false;
  // A longer text the value stands for (the fusion as printed, where the value is its hash):
  // gathered only when this fact is the one that differs, to name the first line that differs.
  std::string detail = {};
};

// What one rank sends: fixed-size, whatever the number of facts (facts past the last slot share it).
struct AgreementRecord {
  static constexpr int slots = 24;  // (at most 32: mesh_only_slots)
  uint32_t failed = 0;   // this rank failed before it could communicate
  uint32_t in_mesh = 0;  // this rank is a device of the mesh (its mesh-only facts count)
  uint32_t facts = 0;    // how many facts
  uint32_t mesh_only_slots = 0;  // bit k: slot k holds a mesh-only fact (skipped on a rank outside the mesh)
  uint32_t on_change = 0;  // sent by agree_on_change (an on_change run's first gather), not agree_with_job
  uint32_t changed = 0;    // agree_on_change: this rank's record differs from the one it last agreed on
                           // (leave_job: this rank leaves on an agreed error it has not printed)
  uint32_t tells = 0;      // leave_job: that error is this rank's own (its agreement named it the teller)
  uint32_t unused = 0;
  std::array<uint64_t, slots> hash{};
  bool operator==(const AgreementRecord&) const = default;
};

AgreementRecord make_record(const std::vector<JobFact>& facts, bool in_mesh);

// Every rank of the job calls it together (one all-gather; nothing in a job of one). `failure`:
// this rank's error, rethrown here after the others learnt of it. `what` prefixes the messages;
// `name_rank` names a failed rank in a PeerError ("rank 1 of the mesh"; default "rank 1 of the job").
void agree_with_job(const std::vector<JobFact>& facts, bool in_mesh, std::exception_ptr failure, const std::string& what,
                    const std::function<std::string(int)>& name_rank = {});

// Whether any rank of the job says `mine` (one word's all-gather; `mine` itself in a job of one).
// Only where every rank of the job is at the same point of the same run (a gather's index check).
bool any_rank(bool mine);

// An on_change run's first gather, of the same record as agree_with_job's (so a rank of another
// agreement option, or one that left the job, meets it in a gather of the same size): whether any
// rank's record `changed` since its last agreement, so that the job agrees (agree_with_job) or
// skips together (a rank agreeing alone would wait for the others forever). A rank that failed
// (`failure`) or left ends it as in agree_with_job; ranks of different agreement options are a
// UserError on every rank naming them.
bool agree_on_change(const AgreementRecord& record, bool changed, std::exception_ptr failure, const std::string& what,
                     const std::function<std::string(int)>& name_rank = {});

// A Python rank whose script ends (the record a run's agreement gathers first), marked as left: a
// rank running again meets it there and fails with "left the job" instead of waiting for it
// forever; ranks that all end together meet each other. `untold`: this rank ends on an error every
// rank raised at one agreement, not printed yet. Returns the rank that prints it (one report): the
// rank the agreement named (the failing rank, with the cause) where it ends so, else the lowest
// rank that ends so (the rank the agreement named caught its own); -1 if none, -2 where nothing
// was gathered (no job of several Alloy started, or a rank already left). Never throws.
int leave_job(bool untold = false);

// Whether an error this process threw came out of an agreement (so every rank of the job threw
// one at the same point): a tool ends such a job with one more agreement on who reports; any other
// failure in a job of several may leave ranks waiting, so the tool aborts the job.
bool failure_agreed();

// The rank of the job that tells an agreed failure whose message is `message` (every rank threw at
// the same agreement: the lowest failing rank its own error, rank 0 a disagreement), or -1 where
// `message` is no failure this rank agreed on: a Python rank's uncaught error is printed by that
// rank only, the job's other ranks ending quietly (one report, not one a rank).
int agreed_failure_teller(const std::string& message);

}  // namespace alloy::multidevice

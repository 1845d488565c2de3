// Pieces of the one-process test communicators of the landed-collective tests (issue 25).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>

#include "alloy/common/error.h"
#include "alloy/multidevice/communicator.h"

namespace alloy::testing {

// A communicator whose collectives a test does not use (each an internal error if called): a test
// team overrides the ones it plays.
class UnusedCollectives : public multidevice::Communicator {
 public:
  using Communicator::Communicator;
  void all_gather(const Tensor&, const Tensor&) override { internal_error("not used"); }
  void reduce_scatter(const Tensor&, const Tensor&, PartialReduce) override { internal_error("not used"); }
  void all_reduce(const Tensor&, const Tensor&, PartialReduce) override { internal_error("not used"); }
  void all_to_all(const Tensor&, const Tensor&) override { internal_error("not used"); }
  void broadcast(const Tensor&, int) override { internal_error("not used"); }
  void send(const Tensor&, int) override { internal_error("not used"); }
  void recv(const Tensor&, int) override { internal_error("not used"); }
};

// A test team's landings: one held at a time, each released once — its place written with NaNs
// then, so a read after the release shows — and a log of both (with whatever else the team logs);
// `bad_call` is the call whose part a test makes the wrong width.
struct Landings {
  // The next call's number; `what` names the landing in the failure where one is still held.
  uint64_t land(const char* what) {
    EXPECT_EQ(held, 0u) << what << " while the previous one is still held";
    held = ++calls;
    log += "land " + std::to_string(held) + "; ";
    return held;
  }
  void release(const multidevice::LandedParts& landed, const Tensor& place) {
    EXPECT_EQ(landed.call, held);
    log += "release " + std::to_string(landed.call) + "; ";
    float* p = static_cast<float*>(place.data());
    std::fill(p, p + place.numel(), std::numeric_limits<float>::quiet_NaN());
    held = 0;
  }

  std::string log;
  uint64_t bad_call = 0;

 private:
  uint64_t calls = 0, held = 0;
};

}  // namespace alloy::testing

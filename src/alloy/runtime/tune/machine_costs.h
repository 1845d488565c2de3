// The machine's measured rates for `--pipeline auto` (host_ir/cost_model.h): the link (a
// neighbour send_recv and an all-gather, each at two sizes: latency and bytes per microsecond)
// and the GEMM rate (a probe `linear` at three sizes: the launch, the rate, the rows at which it
// reaches half the rate), measured once per machine, communicator and team size, never guessed,
// and kept in a JSON file: DIR/machine_costs.json, DIR being $ALLOY_CACHE_DIR, else
// $XDG_CACHE_HOME/alloy, else ~/.cache/alloy. ALLOY_PIPELINE_REMEASURE=1 measures again (and
// rewrites the entry); ALLOY_PIPELINE_NO_COST_CACHE=1 neither reads nor writes the file.
//
// Collective-safe: every rank of the team calls it at the same point and gets the same numbers,
// so every rank makes the same choice (a divergent program would hang). Rank 0 reads the file
// and broadcasts what it found; otherwise every rank measures, each timing being the slowest
// rank's (an all-reduce of the maxima), and rank 0 writes the file. A file that does not parse
// or lacks a field is ignored (measured again and rewritten), never an error.
#pragma once

#include <string>

#include "alloy/host_ir/cost_model.h"
#include "alloy/tensor/tensor.h"

namespace alloy::multidevice {
class Communicator;
}

namespace alloy {

// `team` moves `device`'s tensors (NCCL, staged, MPI or the team of one); `host_team` is its
// host communicator (the agreement and the broadcast go through it). Kept per process by key.
host_ir::MachineCosts machine_costs(multidevice::Communicator& team, multidevice::Communicator& host_team, Device device);

// The cache file's path; empty when there is no directory to keep it in (no HOME).
std::string machine_costs_file();

// Forgets what this process measured or read (tests).
void forget_machine_costs();

}  // namespace alloy

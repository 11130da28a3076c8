// The MPI backend's launcher, called by labkit::run for --backend mpi.
#pragma once

#include "labkit/run.h"

namespace labkit::mpi {

// Runs rank_fn on the first options.ranks processes of MPI_COMM_WORLD (all of
// them unless --ranks was given); rank 0 gets the merged trace.
RunResult run(const RunOptions& options, const std::function<void(Comm&)>& rank_fn);

}  // namespace labkit::mpi

// The MPI backend's launcher, called by labkit::run for --backend mpi.
#pragma once

#include "labkit/run.h"
#include "mpi_comm.h"

namespace labkit::mpi {

// Makes the Comm of the run's group: an MpiComm, or a backend built on MPI (NCCL).
using MakeComm = std::function<std::unique_ptr<Comm>(MPI_Comm comm, Members members, TraceTrack* track, Context& context)>;

// Runs rank_fn on the first options.ranks processes of MPI_COMM_WORLD (all of
// them unless --ranks was given); rank 0 gets the merged trace.
RunResult run(const RunOptions& options, const std::function<void(Comm&)>& rank_fn, const MakeComm& make_comm = {});

}  // namespace labkit::mpi

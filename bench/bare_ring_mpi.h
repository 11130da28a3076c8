// A ring allreduce (sum, float) written directly against MPI: the benchmark's baseline row.
#pragma once

#include <cstddef>

#include <mpi.h>

namespace labkit::bench {

void bare_ring_all_reduce(float* data, std::size_t count, MPI_Comm comm);

}  // namespace labkit::bench

// The benchmark's baseline: a ring allreduce written directly against MPI, on
// raw float arrays, with no labkit layer in between (no Comm, no View, no
// trace, no request table). The labkit ring over the MPI backend runs the same
// steps; the gap between the two is what labkit's abstractions cost.
#include "bare_ring_mpi.h"

#include <algorithm>

#include "labkit/tensor.h"

namespace labkit::bench {

void bare_ring_all_reduce(float* data, std::size_t count, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size == 1) return;
  // Chunk c: the first count % size chunks hold one element more.
  auto begin = [&](int c) { return c * (count / size) + std::min<std::size_t>(c, count % size); };
  auto length = [&](int c) { return int(begin(c + 1) - begin(c)); };
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  // Kept between calls, as a real program keeps its buffers, and in the same
  // memory as labkit's (2 MiB pages): the gap to labkit's ring is its layers.
  static Tensor incoming;
  if (incoming.size() < count / size + 1) incoming = Tensor({count / size + 1});
  float* const scratch = incoming.data();
  // Reduce-scatter: after P-1 steps, rank r holds the sum of chunk (r + 1) mod P.
  for (int step = 0; step < size - 1; ++step) {
    const int send = (rank - step + size) % size, recv = (rank - step - 1 + size) % size;
    MPI_Sendrecv(data + begin(send), length(send), MPI_FLOAT, right, 0, scratch, length(recv), MPI_FLOAT,
                 left, 0, comm, MPI_STATUS_IGNORE);
    float* into = data + begin(recv);
    for (int i = 0; i < length(recv); ++i) into[i] += scratch[i];
  }
  // All-gather: pass the finished chunks around the ring, straight into place.
  for (int step = 0; step < size - 1; ++step) {
    const int send = (rank + 1 - step + size) % size, recv = (rank - step + size) % size;
    MPI_Sendrecv(data + begin(send), length(send), MPI_FLOAT, right, 0, data + begin(recv), length(recv), MPI_FLOAT,
                 left, 0, comm, MPI_STATUS_IGNORE);
  }
}

}  // namespace labkit::bench

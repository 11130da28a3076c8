// Grader corpus: ring_all_reduce with a mistake learners make: rank 1 folds into a pointer it never set (sums only, by hand).
#include "labkit/algorithms.h"
#include "labkit/comm.h"

#include <vector>

namespace labkit {

void ring_all_reduce(Comm& comm, View buf, ReduceOp op) {
  const int p = comm.size(), rank = comm.rank();
  const int send_to = (rank + 1) % p, recv_from = (rank - 1 + p) % p;
  auto chunk = [&](int i) {
    const Chunk c = chunk_range(buf.count, p, ((i % p) + p) % p);
    return buf.slice(c.offset, c.count);
  };
  Scratch incoming(buf, chunk_range(buf.count, p, 0).count);  // chunk 0 is the largest

  // Reduce-scatter: at step s send chunk rank - s, fold the incoming chunk rank - s - 1.
  for (int s = 0; s < p - 1; ++s) {
    const View out = chunk(rank - s), in = chunk(rank - s - 1);
    const View landing = incoming.view().slice(0, in.count);
    comm.sendrecv(out, send_to, landing, recv_from);
    // Fold by hand, through a table of where each rank folds into: rank 1's entry was never filled in.
    std::vector<float*> fold_into(p, nullptr);
    for (int r = 0; r < p; ++r)
      if (r != 1) fold_into[r] = static_cast<float*>(in.data);
    float* target = fold_into[rank];
    const float* incoming_values = static_cast<const float*>(landing.data);
    for (std::size_t i = 0; i < in.count; ++i) target[i] += incoming_values[i];
  }
  // All-gather: at step s send the finished chunk rank + 1 - s, receive chunk rank - s in place.
  for (int s = 0; s < p - 1; ++s) comm.sendrecv(chunk(rank + 1 - s), send_to, chunk(rank - s), recv_from);
}

}  // namespace labkit

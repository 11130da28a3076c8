// Grader corpus: ring_all_reduce with a mistake learners make: the all-gather forwards chunk rank - s (one behind).
#include "labkit/algorithms.h"
#include "labkit/comm.h"

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
    reduce_local(op, buf.dtype, landing.data, in.data, in.count);
  }
  // All-gather: at step s send the finished chunk rank + 1 - s, receive chunk rank - s in place.
  for (int s = 0; s < p - 1; ++s) comm.sendrecv(chunk(rank - s), send_to, chunk(rank - s - 1), recv_from);
}

}  // namespace labkit

// Grader corpus: ring_all_gather with a mistake learners make: forwards block rank - s - 1, one behind.
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void ring_all_gather(Comm& comm, View send, View recv) {
  const int p = comm.size(), rank = comm.rank();
  const int send_to = (rank + 1) % p, recv_from = (rank - 1 + p) % p;
  auto block = [&](int i) { return recv.slice(std::size_t((i % p + p) % p) * send.count, send.count); };

  copy_local(block(rank), send);
  // At step s forward block rank - s, receive block rank - s - 1.
  for (int s = 0; s < p - 1; ++s) comm.sendrecv(block(rank - s - 1), send_to, block(rank - s - 2), recv_from);
}

}  // namespace labkit

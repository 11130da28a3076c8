// STUB: // EXERCISE 1.3
// Ring all-gather.
//
//   0 → 1 → 2 → 3 → 0      every rank sends only to its right neighbour
//
// recv holds P blocks; block i is rank i's send buffer. A rank first copies its
// own block, then for P-1 steps forwards the block it received last (P = 4):
//
//   step  r0 sends  r1 sends  r2 sends  r3 sends
//     0     b0        b1        b2        b3
//     1     b3        b0        b1        b2
//     2     b2        b3        b0        b1
//
// Cost: (P-1) alpha + (P-1)/P n beta, n the size of the gathered buffer.
// STUB: // Use comm.sendrecv so that sending right and receiving from the left overlap.
// STUB: // Grade it: ./labkit grade collectives; run the lab on it: ./labkit mine collectives
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void ring_all_gather(Comm& comm, View send, View recv) {
  const int p = comm.size(), rank = comm.rank();
  const int send_to = (rank + 1) % p, recv_from = (rank - 1 + p) % p;
  auto block = [&](int i) { return recv.slice(std::size_t((i % p + p) % p) * send.count, send.count); };

  // BEGIN EXERCISE: copy your own send buffer into block(rank) (copy_local).
  // STUB: (void)send_to, (void)recv_from, (void)block;
  copy_local(block(rank), send);
  // END EXERCISE
  // At step s forward block rank - s, receive block rank - s - 1.
  // BEGIN EXERCISE: at step s (0 .. P-2) forward block(rank - s) to send_to and receive block(rank - s - 1) from recv_from.
  for (int s = 0; s < p - 1; ++s) comm.sendrecv(block(rank - s), send_to, block(rank - s - 1), recv_from);
  // END EXERCISE
}

}  // namespace labkit

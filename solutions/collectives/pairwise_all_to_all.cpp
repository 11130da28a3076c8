// STUB: // EXERCISE 1.4
// Pairwise all-to-all: P-1 rounds; in round s rank r sends its block for
// r + s and receives the block r - s addressed to it (P = 4):
//
//   round  r0       r1       r2       r3
//     1    →1 ←3    →2 ←0    →3 ←1    →0 ←2
//     2    →2 ←2    →3 ←3    →0 ←0    →1 ←1
//     3    →3 ←1    →0 ←2    →1 ←3    →2 ←0
//
// Every round is a perfect matching of senders to receivers, so no device's
// port carries two messages at once; but the devices behind one NIC send
// through it together whenever their partners are on other nodes, and share
// its bandwidth (book chapter 2). send and recv hold P blocks; recv block i
// comes from rank i's send block r. They must not overlap. Cost: (P-1)(alpha + n/P beta).
// STUB: // Grade it: ./labkit grade collectives; run the lab on it: ./labkit mine collectives
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void pairwise_all_to_all(Comm& comm, View send, View recv) {
  const int p = comm.size(), rank = comm.rank();
  const std::size_t n = send.count / p;
  auto block = [&](View v, int i) { return v.slice(std::size_t(i) * n, n); };

  // BEGIN EXERCISE: copy your own block: recv block `rank` = send block `rank`.
  // STUB: (void)rank, (void)block, (void)recv;
  copy_local(block(recv, rank), block(send, rank));
  // END EXERCISE
  // BEGIN EXERCISE: for s = 1 .. P-1, sendrecv send block (rank + s) to rank + s and
  //       receive recv block (rank - s) from rank - s (both mod P: (rank - s + P) % P, since
  //       C++'s % of a negative number is negative, and rank 0 meets one in its first round).
  for (int s = 1; s < p; ++s) {
    const int send_to = (rank + s) % p, recv_from = (rank - s + p) % p;
    comm.sendrecv(block(send, send_to), send_to, block(recv, recv_from), recv_from);
  }
  // END EXERCISE
}

}  // namespace labkit

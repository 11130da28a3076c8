// Ring reduce-scatter: the first half of ring allreduce on its own.
//
//   0 → 1 → 2 → 3 → 0      every rank sends only to its right neighbour
//
// send holds P blocks of recv.count elements; rank r ends with block r reduced
// over all ranks. A running sum travels the ring: at step s rank r sends its
// partial block r - s - 1 and folds the incoming partial block r - s - 2 (P = 4):
//
//   step  r0 sends  r1 sends  r2 sends  r3 sends
//     0     b3        b0        b1        b2
//     1     b2        b3        b0        b1
//     2     b1        b2        b3        b0
//
// Partial sums live in a scratch copy, so send is left as it was.
// Cost: (P-1) alpha + (P-1)/P n beta, n the size of send.
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void ring_reduce_scatter(Comm& comm, View send, View recv, ReduceOp op) {
  const int p = comm.size(), rank = comm.rank();
  const int send_to = (rank + 1) % p, recv_from = (rank - 1 + p) % p;
  Scratch partial(send, send.count), incoming(send, recv.count);
  copy_local(partial.view(), send);
  auto block = [&](int i) { return partial.view().slice(std::size_t((i % p + p) % p) * recv.count, recv.count); };

  for (int s = 0; s < p - 1; ++s) {
    const View in = block(rank - s - 2);
    comm.sendrecv(block(rank - s - 1), send_to, incoming.view(), recv_from);
    reduce_local(op, send.dtype, incoming.view().data, in.data, in.count);
  }
  copy_local(recv, block(rank));
}

}  // namespace labkit

// Binomial-tree reduce: the broadcast tree run backwards.
//
// Relative rank vr = (rank - root) mod P. In round k (mask = 2^k) every rank
// with bit k set sends its partial result to vr - mask and drops out; the
// others receive from vr + mask and fold it in. After ceil(log2 P) rounds vr 0
// (the root) holds the reduction of every rank:
//
//        0   1   2   3   4   5   6   7
//        ←───┘   ←───┘   ←───┘   ←───┘        round 1
//        ←───────┘       ←───────┘            round 2
//        ←───────────────┘                    round 3
//
// Partial results live in a scratch copy, so the other ranks' buffers stay as
// they were (what torch.distributed.reduce promises). Cost: ceil(log2 P) (alpha + n beta).
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void binomial_tree_reduce(Comm& comm, View buf, ReduceOp op, int root) {
  const int p = comm.size(), vr = (comm.rank() - root + p) % p;
  auto real = [&](int v) { return (v + root) % p; };
  Scratch partial(buf, buf.count), incoming(buf, buf.count);
  copy_local(partial.view(), buf);

  for (int mask = 1; mask < p; mask <<= 1) {
    if (vr & mask) {
      comm.send(partial.view(), real(vr - mask));
      return;
    }
    if (vr + mask < p) {
      comm.recv(incoming.view(), real(vr + mask));
      reduce_local(op, buf.dtype, incoming.view().data, partial.view().data, buf.count);
    }
  }
  copy_local(buf, partial.view());  // only the root gets here
}

}  // namespace labkit

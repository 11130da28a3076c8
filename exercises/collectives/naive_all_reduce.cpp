// EXERCISE 1.1
// Naive allreduce: reduce everything to rank 0, then send the result back out.
//
//   reduce phase                 broadcast phase
//   1 ──┐                         ┌──→ 1
//   2 ──┼──→ 0 (sums, in order)   0 ──┼──→ 2
//   3 ──┘                         └──→ 3
//
// Rank 0 receives P-1 messages one after the other, then sends P-1: every byte
// funnels through one rank's link. Cost: 2(P-1) alpha + 2(P-1) n beta (the
// alpha-beta model, Hockney 1994) — it grows with P, which is why nobody uses
// it at scale, and why it is the first thing to beat.
//
// You have: comm.rank(), comm.size(), comm.send(view, to), comm.recv(view, from),
// reduce_local(op, dtype, in, inout, count), and Scratch (a temporary buffer).
// Grade it: ./labkit grade collectives; run the lab on it: ./labkit mine collectives
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void naive_all_reduce(Comm& comm, View buf, ReduceOp op) {
  constexpr int root = 0;
  if (comm.rank() != root) {
    // TODO: send your buffer to the root, then receive the result into it.
    return;
  }
  // Reduce phase: fold in ranks 1, 2, ... in order.
  Scratch incoming(buf, buf.count);
  // TODO: for each other rank, receive into incoming.view() and reduce it into buf.
  (void)incoming, (void)op;
  // Broadcast phase: hand the result back to every other rank.
  // TODO: send buf to every other rank.
}

}  // namespace labkit

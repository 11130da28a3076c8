// EXERCISE 2.1
// Ring allreduce: a ring reduce-scatter followed by a ring all-gather
// (Patarasuk & Yuan 2009; Gibiansky 2017, baidu-allreduce). The exercise is
// the one in the course reading "Day 64: Distributed Training Fundamentals"
// (book/99-references.md).
//
//   0 → 1 → 2 → 3 → 0      every rank sends only to its right neighbour
//
// The buffer is cut into P chunks (chunk_range handles counts that do not
// divide). P = 4, chunk each rank sends at step s:
//
//   reduce-scatter           all-gather
//   step  r0 r1 r2 r3        step  r0 r1 r2 r3
//     0    0  1  2  3          0    1  2  3  0
//     1    3  0  1  2          1    0  1  2  3
//     2    2  3  0  1          2    3  0  1  2
//
// After reduce-scatter rank r holds the full sum of chunk r+1; all-gather
// passes the finished chunks around. Each rank sends 2(P-1)/P of the buffer.
// Cost: 2(P-1) alpha + 2(P-1)/P n beta — the bandwidth term does not grow with P.
// Watch yours run: ./labkit mine ring_allreduce --step
// Grade it: ./labkit grade ring_allreduce
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
    // TODO: sendrecv chunk(rank - s) to send_to, receiving into the first in.count
    //       elements of incoming.view() from recv_from, where in = chunk(rank - s - 1);
    //       then reduce_local(op, buf.dtype, <incoming>, in.data, in.count).
  }
  // All-gather: at step s send the finished chunk rank + 1 - s, receive chunk rank - s in place.
  // TODO: for s = 0 .. P-2, sendrecv chunk(rank + 1 - s) to send_to, chunk(rank - s) from recv_from.
  (void)send_to, (void)recv_from, (void)chunk, (void)op;
}

}  // namespace labkit

// Tree allreduce: a binomial-tree reduce to rank 0, then a binomial-tree
// broadcast back out (MPICH's short-message reduce and broadcast: Thakur,
// Rabenseifner & Gropp 2005).
//
//   reduce (up)             broadcast (down)
//   0 ← 1   2 ← 3           0 → 4
//   0 ← 2                   0 → 2   4 → 6
//   0 ← 4 ...               0 → 1   2 → 3 ...
//
// 2 ceil(log2 P) rounds instead of the naive 2(P-1), but every round moves the
// whole buffer: Cost: 2 ceil(log2 P) (alpha + n beta). Latency-optimal, not
// bandwidth-optimal — the right choice only for small messages.
#include "labkit/algorithms.h"

namespace labkit {

void binomial_tree_all_reduce(Comm& comm, View buf, ReduceOp op) {
  binomial_tree_reduce(comm, buf, op, 0);
  binomial_tree_broadcast(comm, buf, 0);
}

}  // namespace labkit

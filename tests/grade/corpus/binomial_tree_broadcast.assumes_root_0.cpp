// Grader corpus: binomial_tree_broadcast with a mistake learners make: numbers the tree from rank 0 whatever the root.
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void binomial_tree_broadcast(Comm& comm, View buf, int root) {
  const int p = comm.size(), vr = comm.rank();
  auto real = [&](int v) { return v; };
  (void)root;

  // Receive phase: the parent is vr with its lowest set bit cleared.
  int mask = 1;
  while (mask < p) {
    if (vr & mask) {
      comm.recv(buf, real(vr - mask));
      break;
    }
    mask <<= 1;
  }
  // Send phase: children at vr + mask for each smaller mask, farthest first.
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < p) comm.send(buf, real(vr + mask));
}

}  // namespace labkit

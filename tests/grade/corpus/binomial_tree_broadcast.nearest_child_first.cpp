// Grader corpus: binomial_tree_broadcast with a mistake learners make: sends to the nearest child first: right values, the far subtree starts late.
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void binomial_tree_broadcast(Comm& comm, View buf, int root) {
  const int p = comm.size(), vr = (comm.rank() - root + p) % p;
  auto real = [&](int v) { return (v + root) % p; };

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
  for (int child = 1; child < mask; child <<= 1)
    if (vr + child < p) comm.send(buf, real(vr + child));
}

}  // namespace labkit

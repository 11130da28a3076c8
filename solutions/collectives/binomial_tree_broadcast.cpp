// STUB: // EXERCISE 1.2
// Binomial-tree broadcast.
//
// Ranks are numbered relative to the root (vr = (rank - root) mod P). In each
// round every rank that already holds the data sends it to the rank half the
// remaining distance away, so the number of holders doubles per round (P = 8):
//
//   round 1:  0 → 4
//   round 2:  0 → 2   4 → 6
//   round 3:  0 → 1   2 → 3   4 → 5   6 → 7
//
// A rank receives once, from vr minus its lowest set bit, then sends to
// vr + mask for every mask below that bit. The root (vr = 0) has no set bit:
// it receives nothing and sends for every mask below the first power of two
// >= P, as if its bit were there. Cost: ceil(log2 P) (alpha + n beta)
// (MPICH's short-message broadcast: Thakur, Rabenseifner & Gropp 2005).
// STUB: // It must work for any P (not only powers of two) and any root.
// STUB: // Grade it: ./labkit grade collectives; run the lab on it: ./labkit mine collectives
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void binomial_tree_broadcast(Comm& comm, View buf, int root) {
  const int p = comm.size(), vr = (comm.rank() - root + p) % p;
  auto real = [&](int v) { return (v + root) % p; };

  // Receive phase: the parent is vr with its lowest set bit cleared.
  // BEGIN EXERCISE: find the lowest set bit `mask` of vr (the root, vr = 0, has none: then mask is the
  //       first power of two >= p); if vr != 0, receive buf from real(vr - mask).
  // STUB: (void)buf, (void)vr, (void)real;
  int mask = 1;
  while (mask < p) {
    if (vr & mask) {
      comm.recv(buf, real(vr - mask));
      break;
    }
    mask <<= 1;
  }
  // END EXERCISE
  // Send phase: children at vr + mask for each smaller mask, farthest first.
  // BEGIN EXERCISE: for mask = (that bit) / 2 down to 1: if vr + mask < p, send buf to real(vr + mask).
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < p) comm.send(buf, real(vr + mask));
  // END EXERCISE
}

}  // namespace labkit

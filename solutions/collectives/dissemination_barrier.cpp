// Dissemination barrier (Hensgen, Finkel & Manber 1988): in round k every rank
// signals rank + 2^k and waits for rank - 2^k. After ceil(log2 P) rounds each
// rank has heard, directly or through others, from every rank.
// Cost: ceil(log2 P) alpha (messages carry no data).
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void dissemination_barrier(Comm& comm) {
  const int p = comm.size(), rank = comm.rank();
  const View signal{nullptr, 0, DType::i32};
  for (int distance = 1; distance < p; distance <<= 1)
    comm.sendrecv(signal, (rank + distance) % p, signal, (rank - distance + p) % p);
}

}  // namespace labkit

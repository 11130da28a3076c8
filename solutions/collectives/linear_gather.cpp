// Linear gather: every rank sends its block straight to the root.
//
//   1 ──┐
//   2 ──┼──→ root        recv block i = rank i's send
//   3 ──┘
//
// The root posts all P-1 receives at once; the messages then queue on the
// root's incoming link. Cost: alpha + (P-1)/P n beta with n the gathered size —
// the root's link carries every byte.
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void linear_gather(Comm& comm, View send, View recv, int root) {
  const int p = comm.size();
  if (comm.rank() != root) {
    comm.send(send, root);
    return;
  }
  std::vector<Request> pending;
  for (int from = 0; from < p; ++from) {
    const View block = recv.slice(std::size_t(from) * send.count, send.count);
    if (from == root) copy_local(block, send);
    else pending.push_back(comm.irecv(block, from));
  }
  for (Request& r : pending) r.wait();
}

}  // namespace labkit

// Linear scatter: the root sends block i straight to rank i.
//
//          ┌──→ 1
//   root ──┼──→ 2        rank i's recv = root's send block i
//          └──→ 3
//
// The root posts all P-1 sends at once; they queue on its outgoing link.
// Cost: alpha + (P-1)/P n beta with n the root's send size.
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void linear_scatter(Comm& comm, View send, View recv, int root) {
  const int p = comm.size();
  if (comm.rank() != root) {
    comm.recv(recv, root);
    return;
  }
  std::vector<Request> pending;
  for (int to = 0; to < p; ++to) {
    const View block = send.slice(std::size_t(to) * recv.count, recv.count);
    if (to == root) copy_local(recv, block);
    else pending.push_back(comm.isend(block, to));
  }
  for (Request& r : pending) r.wait();
}

}  // namespace labkit

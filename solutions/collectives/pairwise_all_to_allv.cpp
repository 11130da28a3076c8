// Pairwise all-to-all with blocks of any size (MPI_Alltoallv): the rounds of
// pairwise_all_to_all, each block found where the counts before it end. An MoE
// layer's dispatch is one: each rank sends every expert's rank the tokens routed
// there, as many as the router chose. Cost: (P-1) alpha plus the busiest pair's
// bytes in each round, so one overloaded rank slows every round it is in.
#include <numeric>
#include <vector>

#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void pairwise_all_to_allv(Comm& comm, View send, std::span<const std::size_t> send_counts, View recv,
                          std::span<const std::size_t> recv_counts) {
  const int p = comm.size(), rank = comm.rank();
  // Where each block starts: the running sums of the counts (MPI's displacements).
  std::vector<std::size_t> send_at(p), recv_at(p);
  std::exclusive_scan(send_counts.begin(), send_counts.end(), send_at.begin(), std::size_t(0));
  std::exclusive_scan(recv_counts.begin(), recv_counts.end(), recv_at.begin(), std::size_t(0));
  auto to = [&](int peer) { return send.slice(send_at[peer], send_counts[peer]); };
  auto from = [&](int peer) { return recv.slice(recv_at[peer], recv_counts[peer]); };

  copy_local(from(rank), to(rank));
  for (int s = 1; s < p; ++s) {
    const int send_to = (rank + s) % p, recv_from = (rank - s + p) % p;
    comm.sendrecv(to(send_to), send_to, from(recv_from), recv_from);
  }
}

}  // namespace labkit

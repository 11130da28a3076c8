// Grader corpus: pairwise_all_to_all with a mistake learners make: partners rank XOR round: a perfect matching only when P is a power of two.
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void pairwise_all_to_all(Comm& comm, View send, View recv) {
  const int p = comm.size(), rank = comm.rank();
  const std::size_t n = send.count / p;
  auto block = [&](View v, int i) { return v.slice(std::size_t(i) * n, n); };

  copy_local(block(recv, rank), block(send, rank));
  for (int s = 1; s < p; ++s) {
    const int send_to = rank ^ s, recv_from = rank ^ s;
    comm.sendrecv(block(send, send_to), send_to, block(recv, recv_from), recv_from);
  }
}

}  // namespace labkit

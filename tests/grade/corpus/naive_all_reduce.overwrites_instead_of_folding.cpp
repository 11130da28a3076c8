// Grader corpus: naive_all_reduce with a mistake learners make: rank 0 keeps the last buffer it receives instead of folding each in.
#include "labkit/algorithms.h"
#include "labkit/comm.h"

namespace labkit {

void naive_all_reduce(Comm& comm, View buf, ReduceOp op) {
  constexpr int root = 0;
  if (comm.rank() != root) {
    comm.send(buf, root);
    comm.recv(buf, root);
    return;
  }
  // Reduce phase: fold in ranks 1, 2, ... in order.
  Scratch incoming(buf, buf.count);
  for (int from = 1; from < comm.size(); ++from) {
    comm.recv(buf, from);
  }
  // Broadcast phase: hand the result back to every other rank.
  for (int to = 1; to < comm.size(); ++to) comm.send(buf, to);
}

}  // namespace labkit

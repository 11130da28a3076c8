// Hierarchical allreduce (the reading's guide, section 3.6): keep the slow
// inter-node links for as few steps as possible.
//
//   node 0: 0 1 2 3 4 5 6 7      node 1: 8 9 ... 15
//   1. reduce inside each node to its leader (binomial tree over NVLink)
//   2. ring allreduce among the leaders 0, 8, 16, ... (over InfiniBand)
//   3. broadcast inside each node from its leader (binomial tree over NVLink)
//
// With G devices per node and N nodes:
// Cost: 2 ceil(log2 G) (alpha_intra + n beta_intra)
//       + 2 (N-1) alpha_inter + 2 (N-1)/N n beta_inter.
// A flat ring over the same ranks pays the inter-node link on all 2(P-1) steps.
#include "labkit/algorithms.h"

namespace labkit {

void hierarchical_all_reduce(Comm& comm, View buf, ReduceOp op) {
  Comm& node = comm.node_group();  // split on the first call, kept for the next
  Comm* leaders = comm.node_leaders();

  binomial_tree_reduce(node, buf, op, 0);
  if (leaders) ring_all_reduce(*leaders, buf, op);
  binomial_tree_broadcast(node, buf, 0);
}

}  // namespace labkit

// STUB: // EXERCISE 2.3
// Hierarchical allreduce (Jia et al. 2018, "Highly Scalable Deep Learning
// Training System with Mixed-Precision", arXiv:1807.11205): keep the slow
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
// STUB: // You have the groups (node: this rank's node; leaders: every node's rank 0, or
// STUB: // null on the other ranks), and the algorithms binomial_tree_reduce,
// STUB: // ring_all_reduce and binomial_tree_broadcast.
// STUB: // Grade it: ./labkit grade ring_allreduce; run the lab on it: ./labkit mine ring_allreduce
#include "labkit/algorithms.h"

namespace labkit {

void hierarchical_all_reduce(Comm& comm, View buf, ReduceOp op) {
  Comm& node = comm.node_group();  // split on the first call, kept for the next
  Comm* leaders = comm.node_leaders();  // null unless this rank is its node's rank 0

  // BEGIN EXERCISE: 1. reduce inside the node to its rank 0;
  //       2. if this rank is a leader, allreduce among the leaders;
  //       3. broadcast inside the node from its rank 0.
  // STUB: (void)node, (void)leaders, (void)buf, (void)op;
  binomial_tree_reduce(node, buf, op, 0);
  if (leaders) ring_all_reduce(*leaders, buf, op);
  binomial_tree_broadcast(node, buf, 0);
  // END EXERCISE
}

}  // namespace labkit

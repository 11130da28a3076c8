// STUB: // EXERCISE 2.3
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
// STUB: // You have comm.node_of(rank), comm.split(color, key) (ranks with the same color
// STUB: // form a group; a negative color joins none and gets a null pointer), and the
// STUB: // algorithms binomial_tree_reduce, ring_all_reduce and binomial_tree_broadcast.
// STUB: // Grade it: ./labkit grade ring_allreduce
#include "labkit/algorithms.h"

namespace labkit {

void hierarchical_all_reduce(Comm& comm, View buf, ReduceOp op) {
  // BEGIN EXERCISE: node = comm.split(<this rank's node>, comm.rank()), then
  //       leaders = comm.split(<0 if this rank is its node's rank 0, else -1>, comm.rank()).
  // STUB: (void)comm;
  std::unique_ptr<Comm> node = comm.split(comm.node_of(comm.rank()), comm.rank());
  std::unique_ptr<Comm> leaders = comm.split(node->rank() == 0 ? 0 : -1, comm.rank());
  // END EXERCISE

  // BEGIN EXERCISE: 1. reduce inside the node to its rank 0;
  //       2. if this rank is a leader, allreduce among the leaders;
  //       3. broadcast inside the node from its rank 0.
  // STUB: (void)buf, (void)op;
  binomial_tree_reduce(*node, buf, op, 0);
  if (leaders) ring_all_reduce(*leaders, buf, op);
  binomial_tree_broadcast(*node, buf, 0);
  // END EXERCISE
}

}  // namespace labkit

#include "labkit/cost_model.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace labkit {

CostEstimate native_cost(Collective op, std::size_t bytes, int ranks, const Link& link) {
  if (ranks <= 1) return {0.0, "none"};
  const double p = ranks, n = double(bytes), a = link.alpha, b = 1.0 / link.bandwidth;
  const double log_p = std::bit_width(unsigned(ranks - 1));  // ceil(log2 P)
  switch (op) {
    case Collective::all_reduce: {
      // Ring: reduce-scatter then all-gather, 2(P-1) steps of n/P bytes.
      // Tree: reduce up and broadcast down a binary tree, 2 log2 P steps of n bytes.
      // NCCL's tuner takes the faster one; tree wins for small messages.
      const double ring = 2 * (p - 1) * a + 2 * (p - 1) / p * n * b;
      const double tree = 2 * log_p * a + 2 * log_p * n * b;
      return ring <= tree ? CostEstimate{ring, "ring"} : CostEstimate{tree, "tree"};
    }
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::gather:
    case Collective::scatter:
    case Collective::all_to_all:
      // P-1 steps, each rank moving (P-1)/P of the large buffer once.
      return {(p - 1) * a + (p - 1) / p * n * b, "ring"};
    case Collective::broadcast:
    case Collective::reduce:
      // A pipelined chain: P-1 hops of latency, the buffer crosses each link once.
      return {(p - 1) * a + n * b, "ring"};
    case Collective::barrier:
      return {log_p * a, "dissemination"};
  }
  return {0.0, "none"};
}

}  // namespace labkit

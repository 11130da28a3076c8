// EXERCISE 9.3
// The MoE layer's output: each token's kept assignments' expert outputs,
// weighted by their gates, summed. A dropped assignment adds nothing (the
// block's residual carries its token), and a token whose every assignment
// was dropped gets zero.
//
// returned holds one row of C per entry of send_order (the kept assignments, in
// the order they were sent), back from the experts. Grade it: ./labkit grade moe
#include <algorithm>

#include "labkit/parallel/moe.h"

namespace labkit {

void combine_with_gates(const Routing& r, std::span<const int> send_order, const float* returned, int C, float* y) {
  std::fill_n(y, std::size_t(r.tokens()) * C, 0.0f);
  // TODO: for each sent assignment a, add its gate times its returned row to token a / k's row of y.
  (void)send_order, (void)returned;
}

}  // namespace labkit

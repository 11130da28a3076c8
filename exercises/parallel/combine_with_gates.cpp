// EXERCISE 9.3
// The MoE layer's output: each token's kept assignments' expert outputs,
// weighted by their gates, summed. A dropped assignment adds nothing (the
// block's residual carries its token), and a token whose every assignment
// was dropped gets zero.
//
// returned holds one row of C per entry of send_order (the kept assignments, in
// the order they were sent), back from the experts. y and returned may live on a
// GPU: decide on the host which row of y each returned row adds into and with what
// weight, and let add_rows (moe.h) do the adding where they live.
// Grade it: ./labkit grade moe; run the lab on it: ./labkit mine moe
#include <vector>

#include "labkit/device.h"
#include "labkit/parallel/moe.h"

namespace labkit {

void combine_with_gates(const Routing& r, std::span<const int> send_order, const float* returned, int C, float* y) {
  device_of(y).zero(y, std::size_t(r.tokens()) * C * sizeof(float));
  // TODO: for each sent assignment a (returned row p), the row of y it adds into
  //       (token a / k) and its weight (its gate); then add_rows adds them all.
  (void)send_order, (void)returned;
}

}  // namespace labkit

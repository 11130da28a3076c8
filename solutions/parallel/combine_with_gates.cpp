// STUB: // EXERCISE 9.3
// The MoE layer's output: each token's kept assignments' expert outputs,
// weighted by their gates, summed. A dropped assignment adds nothing (the
// block's residual carries its token), and a token whose every assignment
// was dropped gets zero.
// STUB: //
// STUB: // returned holds one row of C per entry of send_order (the kept assignments, in
// STUB: // the order they were sent), back from the experts. y and returned may live on a
// STUB: // GPU: decide on the host which row of y each returned row adds into and with what
// STUB: // weight, and let add_rows (moe.h) do the adding where they live.
// STUB: // Grade it: ./labkit grade moe; run the lab on it: ./labkit mine moe
#include <vector>

#include "labkit/device.h"
#include "labkit/parallel/moe.h"

namespace labkit {

void combine_with_gates(const Routing& r, std::span<const int> send_order, const float* returned, int C, float* y) {
  device_of(y).zero(y, std::size_t(r.tokens()) * C * sizeof(float));
  // BEGIN EXERCISE: for each sent assignment a (returned row p), the row of y it adds into
  //       (token a / k) and its weight (its gate); then add_rows adds them all.
  // STUB: (void)send_order, (void)returned;
  std::vector<int> tokens;
  std::vector<float> gates;
  for (const int a : send_order) {
    tokens.push_back(a / r.k);
    gates.push_back(r.gate[std::size_t(a)]);
  }
  add_rows(y, returned, tokens, gates, C);
  // END EXERCISE
}

}  // namespace labkit

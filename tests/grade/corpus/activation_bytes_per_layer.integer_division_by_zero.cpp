// Grader corpus: activation_bytes_per_layer with a mistake learners make: splits the heads over tp - 1 ranks in integer arithmetic.
#include "labkit/memory.h"

namespace labkit::memory {

double activation_bytes_per_layer(const ActivationShape& x) {
  const int heads_per_rank = int(x.heads) / (int(x.tp) - 1);  // wrong: tp, not tp - 1
  const double sbh = x.seq * x.micro_batch * x.hidden, t = x.tp;
  const double split_outside = x.sequence_parallel ? t : 1;  // the 10 sbh outside the TP blocks
  if (x.recompute == Recompute::full) return 2 * sbh / split_outside;
  const double scores = x.recompute == Recompute::selective ? 0 : 5 * heads_per_rank * x.seq / x.hidden;
  return sbh * (10 / split_outside + 24 / t + scores);
}

}  // namespace labkit::memory

// Grader corpus: model_state_bytes with a mistake learners make: mixed precision without the fp32 master weights.
#include "labkit/memory.h"

namespace labkit::memory {

ModelStateBytes model_state_bytes(double params, const ModelStatePrecision& precision, const Optimizer& optimizer,
                                  int zero_stage, int dp) {
  // The fraction of a tensor one rank keeps once its stage shards it.
  auto kept = [&](int sharded_from_stage) { return zero_stage >= sharded_from_stage ? 1.0 / dp : 1.0; };
  return {
      .weights = params * bytes_per_element(precision.weights) * kept(3),
      .grads = params * bytes_per_element(precision.grads) * kept(2),
      .master = 0.0,
      .optimizer = params * optimizer.states * bytes_per_element(precision.states) * kept(1),
  };
}

}  // namespace labkit::memory

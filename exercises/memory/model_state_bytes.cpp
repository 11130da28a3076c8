// EXERCISE 3.1
// Model state per GPU under ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", Figure 1).
//
// Mixed-precision Adam keeps, per parameter: bf16 weights (2 B), bf16 gradients
// (2 B), and K = 12 B of optimizer state (an fp32 master copy, fp32 m and v),
// (2 + 2 + K) Psi = 16 Psi in all — the "16 bytes per parameter" rule.
//
//   stage     shards across the dp ranks          bytes per GPU (K = 12)
//   0 (DDP)   nothing                             (2 + 2 + K) Psi       = 16 Psi
//   1 (P_os)  optimizer state (+ master weights)  (2 + 2) Psi + K Psi/dp
//   2 (P_g)   + gradients                         2 Psi + (2 + K) Psi/dp
//   3 (P_p)   + weights (FSDP)                    (2 + 2 + K) Psi/dp
//
// You have bytes_per_element(precision), optimizer.states (tensors per
// parameter: 2 for Adam) and precision.master_weights (fp32, 4 bytes, if true).
// Grade it: ./labkit grade memory; run the lab on it: ./labkit mine memory
#include "labkit/memory.h"

namespace labkit::memory {

ModelStateBytes model_state_bytes(double params, const ModelStatePrecision& precision, const Optimizer& optimizer,
                                  int zero_stage, int dp) {
  // TODO: the bytes each tensor takes on one GPU; a stage shards (divides by dp)
  //       what it covers and everything the stages below it cover.
  (void)params, (void)precision, (void)optimizer, (void)zero_stage, (void)dp;
  return {.weights = 0, .grads = 0, .master = 0, .optimizer = 0};
}

}  // namespace labkit::memory

// Optimizers over a flat run of parameters and their gradients: the whole
// model on one rank, or one rank's shard of it under ZeRO/FSDP. The state lives
// on the parameters' device, and the update runs there.
#pragma once

#include <span>

#include "labkit/tensor.h"

namespace labkit {

// AdamW (Loshchilov & Hutter 2019): fp32 moments m and v, bias-corrected,
// weight decay applied to the weights directly rather than through the gradient.
// With bf16_weights, the weights hold bfloat16 values (mixed precision): with
// master_weights AdamW keeps an fp32 copy, updates it and rounds it into the
// weights; without, each update is rounded into the weights themselves, and
// updates below half a bf16 step are lost.
struct AdamW {
  float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  bool bf16_weights = false, master_weights = true;
  Tensor m = {}, v = {}, master = {};  // sized on the first update
  int step = 0;
  void update(Tensor& params, const Tensor& grads);              // on the tensors' device
  void update(std::span<float> params, std::span<const float> grads);  // host memory
  // Bytes of optimizer state: m and v, and the master copy if there is one.
  std::size_t state_bytes() const { return m.bytes() + v.bytes() + master.bytes(); }

 private:
  void update(const Device& d, float* params, const float* grads, std::size_t n);
};

// SGD with momentum, as PyTorch writes it: v = momentum v + g; w -= lr v. Host memory.
struct SgdMomentum {
  float lr = 0.1f, momentum = 0.9f;
  std::vector<float> velocity = {};
  void update(std::span<float> params, std::span<const float> grads);
};

}  // namespace labkit

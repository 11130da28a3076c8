// Optimizers over a flat run of parameters and their gradients: the whole
// model on one rank, or one rank's shard of it under ZeRO/FSDP.
#pragma once

#include <span>
#include <vector>

namespace labkit {

// AdamW (Loshchilov & Hutter 2019): fp32 moments m and v, bias-corrected,
// weight decay applied to the weights directly rather than through the gradient.
struct AdamW {
  float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  std::vector<float> m = {}, v = {};  // sized on the first update
  int step = 0;
  void update(std::span<float> params, std::span<const float> grads);
};

// SGD with momentum, as PyTorch writes it: v = momentum v + g; w -= lr v.
struct SgdMomentum {
  float lr = 0.1f, momentum = 0.9f;
  std::vector<float> velocity = {};
  void update(std::span<float> params, std::span<const float> grads);
};

}  // namespace labkit

// Optimizers over a flat run of parameters and their gradients: the whole
// model on one rank, or one rank's shard of it under ZeRO/FSDP. The state lives
// on the parameters' device, and the update runs there.
#pragma once

#include <concepts>
#include <functional>
#include <span>
#include <vector>

#include "labkit/tensor.h"

namespace labkit {

// A run of the flat parameter (and gradient) buffer: one layer, or the embeddings.
struct ParameterRange {
  std::size_t offset, count;
};

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
  // f32 views, on their device (a template only so that a braced {pointer, count} still means a span).
  template <std::same_as<View> V> void update(V params, V grads) { update_views(params, grads); }
  // Bytes of optimizer state: m and v, and the master copy if there is one.
  std::size_t state_bytes() const { return m.bytes() + v.bytes() + master.bytes(); }

 private:
  void update_views(View params, View grads);
  void update(const Device& d, float* params, const float* grads, std::size_t n);
};

// SGD with momentum, as PyTorch writes it: v = momentum v + g; w -= lr v.
struct SgdMomentum {
  float lr = 0.1f, momentum = 0.9f;
  Tensor velocity = {};  // sized on the first update, on the parameters' device
  void update(Tensor& params, const Tensor& grads);                    // on the tensors' device
  void update(std::span<float> params, std::span<const float> grads);  // host memory
  // f32 views, on their device (a template only so that a braced {pointer, count} still means a span).
  template <std::same_as<View> V> void update(V params, V grads) { update_views(params, grads); }

 private:
  void update_views(View params, View grads);
  void update(const Device& d, float* params, const float* grads, std::size_t n);
};

// ---- the large-batch recipe (Goyal et al. 2017; You et al. 2017, 2019)

// Linear scaling: a batch k times larger takes a learning rate k times larger.
inline float linear_scaled_lr(float base_lr, int base_batch, int batch) { return base_lr * batch / base_batch; }
// Gradual warmup: the learning rate climbs linearly to `target` over the first
// `warmup_steps` steps (step counts from 1), then stays there.
inline float warmup_lr(float target, int step, int warmup_steps) {
  return step < warmup_steps ? target * float(step) / float(warmup_steps) : target;
}

// LARS (You, Gitman & Ginsburg 2017) as the comprehensive guide's LARS class
// writes it (book/99-references.md): each layer gets its own rate, trust x ||w|| /
// ||g + wd w|| (1 where either norm is 0), so no layer's step is large beside
// its weights: v = momentum v + local_lr (g + wd w); w -= lr v. `layers` are
// the runs of the buffer that each get a ratio of their own; the two norms of
// each come to the host, the rest stays on the parameters' device.
struct Lars {
  float lr = 0.1f, momentum = 0.9f, weight_decay = 0.0f, trust = 0.001f;
  Tensor velocity = {}, decayed = {};  // sized on the first update; decayed: g + wd w
  void update(Tensor& params, const Tensor& grads, std::span<const ParameterRange> layers);
  void update(std::span<float> params, std::span<const float> grads, std::span<const ParameterRange> layers);

 private:
  void update(const Device& d, float* params, const float* grads, std::size_t n,
              std::span<const ParameterRange> layers);
};

// LAMB: Adam's bias-corrected direction r = m^ / (sqrt(v^) + eps) + wd w per
// layer, scaled by the trust ratio ||w|| / ||r|| (1 where either is 0):
// w -= lr x ratio x r. On the parameters' device, as LARS.
struct Lamb {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.0f;
  Tensor m = {}, v = {}, direction = {};  // sized on the first update
  int step = 0;
  void update(Tensor& params, const Tensor& grads, std::span<const ParameterRange> layers);
  void update(std::span<float> params, std::span<const float> grads, std::span<const ParameterRange> layers);

 private:
  void update(const Device& d, float* params, const float* grads, std::size_t n,
              std::span<const ParameterRange> layers);
};

// Clipping by global norm: scales the gradients by max_norm / ||g|| when ||g||
// exceeds max_norm, and returns ||g|| as it was. ||g|| is over every gradient of
// the model: where each rank holds a shard of them (ZeRO, FSDP), its squared
// norm is one term of a sum over the ranks, so `sum_over_ranks` adds the
// ranks' terms (an allreduce); with whole gradients on every rank (DDP) it is
// left empty and the norm is local.
double clip_by_global_norm(std::span<float> grads, double max_norm,
                           const std::function<double(double)>& sum_over_ranks = {});
// The same on the gradients' device: the squared norm comes to the host, the scaling stays there.
double clip_by_global_norm(Tensor& grads, double max_norm, const std::function<double(double)>& sum_over_ranks = {});

}  // namespace labkit

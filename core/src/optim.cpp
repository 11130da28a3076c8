#include "labkit/optim.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace labkit {

namespace {
void check_sizes(std::size_t params, std::size_t grads) {
  if (params != grads) throw std::invalid_argument("optimizer: parameters and gradients differ in size");
}

// The device both tensors are on, checked.
const Device& device_of_tensors(const Tensor& params, const Tensor& grads) {
  check_sizes(params.size(), grads.size());
  if (params.device().kind != grads.device().kind)
    throw std::invalid_argument("optimizer: parameters and gradients on different devices");
  return params.device();
}

// A state tensor of n floats on d, made on the first update and checked on the others.
void state(Tensor& t, const Device& d, std::size_t n) {
  if (t.size() == 0) t = Tensor({n}, d.kind);
  if (t.size() != n || t.device().kind != d.kind)
    throw std::invalid_argument("optimizer: called on a different set of parameters");
}

// The same for views.
const Device& device_of_views(View params, View grads) {
  check_sizes(params.count, grads.count);
  if (params.dtype != DType::f32 || grads.dtype != DType::f32)
    throw std::invalid_argument("optimizer: parameters and gradients are f32 views");
  const Device& d = device_of(params.data);
  if (device_of(grads.data).kind != d.kind)
    throw std::invalid_argument("optimizer: parameters and gradients on different devices");
  return d;
}
}  // namespace

void AdamW::update(Tensor& params, const Tensor& grads) {
  update(device_of_tensors(params, grads), params.data(), grads.data(), params.size());
}

void AdamW::update(std::span<float> params, std::span<const float> grads) {
  check_sizes(params.size(), grads.size());
  update(device(DeviceKind::cpu), params.data(), grads.data(), params.size());
}

void AdamW::update_views(View params, View grads) {
  update(device_of_views(params, grads), static_cast<float*>(params.data), static_cast<const float*>(grads.data),
         params.count);
}

void AdamW::update(const Device& d, float* params, const float* grads, std::size_t n) {
  state(m, d, n), state(v, d, n);
  if (step == 0 && bf16_weights && master_weights) {  // the master starts as the weights, then rounds them
    master = Tensor({n}, d.kind);
    d.copy(master.data(), params, n * sizeof(float));
  }
  ++step;
  const ops::AdamWStep s{.lr = lr,
                         .beta1 = beta1,
                         .beta2 = beta2,
                         .eps = eps,
                         .weight_decay = weight_decay,
                         .correct1 = 1.0f - std::pow(beta1, float(step)),
                         .correct2 = 1.0f - std::pow(beta2, float(step)),
                         .bf16_weights = bf16_weights};
  d.adamw_update(params, master.size() ? master.data() : nullptr, grads, m.data(), v.data(), long(n), s);
}

void SgdMomentum::update(Tensor& params, const Tensor& grads) {
  update(device_of_tensors(params, grads), params.data(), grads.data(), params.size());
}

void SgdMomentum::update(std::span<float> params, std::span<const float> grads) {
  check_sizes(params.size(), grads.size());
  update(device(DeviceKind::cpu), params.data(), grads.data(), params.size());
}

void SgdMomentum::update_views(View params, View grads) {
  update(device_of_views(params, grads), static_cast<float*>(params.data), static_cast<const float*>(grads.data),
         params.count);
}

void SgdMomentum::update(const Device& d, float* params, const float* grads, std::size_t n) {
  state(velocity, d, n);
  d.sgd_momentum_update(params, velocity.data(), grads, long(n), lr, momentum);
}

namespace {
void check_layers(std::size_t params, std::size_t grads, std::span<const ParameterRange> layers) {
  check_sizes(params, grads);
  for (const ParameterRange& r : layers)
    if (r.offset + r.count > params)
      throw std::invalid_argument("optimizer: a layer [" + std::to_string(r.offset) + ", " +
                                  std::to_string(r.offset + r.count) + ") passes the " + std::to_string(params) +
                                  " parameters");
}

double norm(const Device& d, const float* x, std::size_t n) { return std::sqrt(d.sum_of_squares(x, long(n))); }

// LAMB's trust ratio: ||w|| / ||r||, or 1 where either is 0.
float ratio(double w_norm, double r_norm) { return w_norm > 0 && r_norm > 0 ? float(w_norm / r_norm) : 1.0f; }
}  // namespace

void Lars::update(Tensor& params, const Tensor& grads, std::span<const ParameterRange> layers) {
  update(device_of_tensors(params, grads), params.data(), grads.data(), params.size(), layers);
}

void Lars::update(std::span<float> params, std::span<const float> grads, std::span<const ParameterRange> layers) {
  check_sizes(params.size(), grads.size());
  update(device(DeviceKind::cpu), params.data(), grads.data(), params.size(), layers);
}

void Lars::update(const Device& d, float* params, const float* grads, std::size_t n,
                  std::span<const ParameterRange> layers) {
  check_layers(n, n, layers);
  state(velocity, d, n), state(decayed, d, n);
  for (const ParameterRange& r : layers) {
    float* w = params + r.offset;
    float* g = decayed.data() + r.offset;
    d.copy(g, grads + r.offset, r.count * sizeof(float));
    d.axpy(g, weight_decay, w, long(r.count));
    const double w_norm = norm(d, w, r.count), g_norm = norm(d, g, r.count);
    d.scale(g, w_norm > 0 && g_norm > 0 ? float(trust * w_norm / g_norm) : 1.0f, long(r.count));
    d.sgd_momentum_update(w, velocity.data() + r.offset, g, long(r.count), lr, momentum);
  }
}

void Lamb::update(Tensor& params, const Tensor& grads, std::span<const ParameterRange> layers) {
  update(device_of_tensors(params, grads), params.data(), grads.data(), params.size(), layers);
}

void Lamb::update(std::span<float> params, std::span<const float> grads, std::span<const ParameterRange> layers) {
  check_sizes(params.size(), grads.size());
  update(device(DeviceKind::cpu), params.data(), grads.data(), params.size(), layers);
}

void Lamb::update(const Device& d, float* params, const float* grads, std::size_t n,
                  std::span<const ParameterRange> layers) {
  check_layers(n, n, layers);
  state(m, d, n), state(v, d, n), state(direction, d, n);
  ++step;
  const ops::LambStep s{.beta1 = beta1,
                        .beta2 = beta2,
                        .eps = eps,
                        .weight_decay = weight_decay,
                        .correct1 = 1 - std::pow(double(beta1), step),
                        .correct2 = 1 - std::pow(double(beta2), step)};
  for (const ParameterRange& r : layers) {
    float* w = params + r.offset;
    float* rd = direction.data() + r.offset;
    d.lamb_direction(rd, m.data() + r.offset, v.data() + r.offset, grads + r.offset, w, long(r.count), s);
    d.axpy(w, -(lr * ratio(norm(d, w, r.count), norm(d, rd, r.count))), rd, long(r.count));
  }
}

namespace {
double clip_by_global_norm(const Device& d, float* grads, std::size_t n, double max_norm,
                           const std::function<double(double)>& sum_over_ranks) {
  double squared = d.sum_of_squares(grads, long(n));
  if (sum_over_ranks) squared = sum_over_ranks(squared);
  const double total = std::sqrt(squared);
  if (total > max_norm) d.scale(grads, float(max_norm / total), long(n));
  return total;
}
}  // namespace

double clip_by_global_norm(std::span<float> grads, double max_norm, const std::function<double(double)>& sum_over_ranks) {
  return clip_by_global_norm(device(DeviceKind::cpu), grads.data(), grads.size(), max_norm, sum_over_ranks);
}

double clip_by_global_norm(Tensor& grads, double max_norm, const std::function<double(double)>& sum_over_ranks) {
  return clip_by_global_norm(grads.device(), grads.data(), grads.size(), max_norm, sum_over_ranks);
}

}  // namespace labkit

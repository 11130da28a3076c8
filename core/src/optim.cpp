#include "labkit/optim.h"

#include <cmath>
#include <stdexcept>

namespace labkit {

namespace {
void check(std::span<float> params, std::span<const float> grads, std::vector<float>& state) {
  if (params.size() != grads.size()) throw std::invalid_argument("optimizer: parameters and gradients differ in size");
  if (state.empty()) state.assign(params.size(), 0.0f);
  if (state.size() != params.size()) throw std::invalid_argument("optimizer: called on a different set of parameters");
}
}  // namespace

void AdamW::update(std::span<float> params, std::span<const float> grads) {
  check(params, grads, m);
  check(params, grads, v);
  ++step;
  const float correct1 = 1.0f - std::pow(beta1, float(step)), correct2 = 1.0f - std::pow(beta2, float(step));
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = grads[i];
    m[i] = beta1 * m[i] + (1 - beta1) * g;
    v[i] = beta2 * v[i] + (1 - beta2) * g * g;
    params[i] -= lr * ((m[i] / correct1) / (std::sqrt(v[i] / correct2) + eps) + weight_decay * params[i]);
  }
}

void SgdMomentum::update(std::span<float> params, std::span<const float> grads) {
  check(params, grads, velocity);
  for (std::size_t i = 0; i < params.size(); ++i) {
    velocity[i] = momentum * velocity[i] + grads[i];
    params[i] -= lr * velocity[i];
  }
}

}  // namespace labkit

#include "labkit/optim.h"

#include <cmath>
#include <stdexcept>

namespace labkit {

namespace {
void check_sizes(std::size_t params, std::size_t grads) {
  if (params != grads) throw std::invalid_argument("optimizer: parameters and gradients differ in size");
}
}  // namespace

void AdamW::update(Tensor& params, const Tensor& grads) {
  check_sizes(params.size(), grads.size());
  if (params.device().kind != grads.device().kind)
    throw std::invalid_argument("optimizer: parameters and gradients on different devices");
  update(params.device(), params.data(), grads.data(), params.size());
}

void AdamW::update(std::span<float> params, std::span<const float> grads) {
  check_sizes(params.size(), grads.size());
  update(device(DeviceKind::cpu), params.data(), grads.data(), params.size());
}

void AdamW::update(const Device& d, float* params, const float* grads, std::size_t n) {
  if (step == 0) {
    m = Tensor({n}, d.kind);
    v = Tensor({n}, d.kind);
    if (bf16_weights && master_weights) {  // the master starts as the weights, then rounds them
      master = Tensor({n}, d.kind);
      d.copy(master.data(), params, n * sizeof(float));
    }
  }
  if (m.size() != n || m.device().kind != d.kind)
    throw std::invalid_argument("optimizer: called on a different set of parameters");
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

void SgdMomentum::update(std::span<float> params, std::span<const float> grads) {
  check_sizes(params.size(), grads.size());
  if (velocity.empty()) velocity.assign(params.size(), 0.0f);
  if (velocity.size() != params.size()) throw std::invalid_argument("optimizer: called on a different set of parameters");
  for (std::size_t i = 0; i < params.size(); ++i) {
    velocity[i] = momentum * velocity[i] + grads[i];
    params[i] -= lr * velocity[i];
  }
}

}  // namespace labkit

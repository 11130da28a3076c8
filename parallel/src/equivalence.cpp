#include "labkit/parallel/equivalence.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "labkit/optim.h"
#include "labkit/parallel/sampler.h"

namespace labkit {

std::vector<float> train_one_rank_sgd(const GptConfig& config, const Sequences& data, std::uint64_t seed, int steps,
                                      int batch, float lr, DeviceKind where) {
  Gpt model(config, seed, where);
  SgdMomentum sgd{.lr = lr};
  const auto step = [&](Gpt& m) { sgd.update(m.parameters(), m.gradients()); };
  return train_one_rank(model, data, seed, steps, batch, step).weights;
}

OneRankRun train_one_rank(Gpt& model, const Sequences& data, std::uint64_t seed, int steps, int batch,
                          const std::function<void(Gpt&)>& update, bool reversed, int micro_steps) {
  OneRankRun out;
  const DistributedSampler sampler(data.count, 1, 0, seed);
  if (micro_steps < 1 || batch % micro_steps != 0)
    throw std::invalid_argument(fmt::format("train_one_rank: a batch of {} in {} micro-steps", batch, micro_steps));
  const int micro_batch = batch / micro_steps;
  std::vector<int> x, y;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::size_t> picked = batch_of(sampler, s, batch);
    if (reversed) std::reverse(picked.begin(), picked.end());
    model.zero_grad();
    for (int m = 0; m < micro_steps; ++m) {
      const auto first = picked.begin() + std::ptrdiff_t(m) * micro_batch;
      fill_batch(data, {first, first + micro_batch}, x, y);
      model.queue_forward(x, y, micro_batch, model.config().max_seq);  // its loss is not read: nothing waits
      model.backward();                                                // it adds to the gradients
    }
    // Each micro-step's gradients are of its mean loss: the whole batch's mean is their sum over micro_steps.
    Tensor& grads = model.gradients();
    if (micro_steps > 1) model.device().divide(DType::f32, grads.data(), grads.size(), micro_steps);
    if (s == 0) out.first_grads = grads.to_host();
    update(model);
  }
  out.weights = model.parameters().to_host();
  return out;
}

}  // namespace labkit

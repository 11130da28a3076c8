#include "labkit/parallel/equivalence.h"

#include <algorithm>

#include "labkit/optim.h"
#include "labkit/parallel/sampler.h"

namespace labkit {

std::vector<float> train_one_rank(const GptConfig& config, const Sequences& data, std::uint64_t seed, int steps,
                                  int batch, const OptimizerUpdate& update, bool reversed) {
  Gpt model(config, seed);
  const auto whole = [&](Gpt& m) {
    update({m.parameters().data(), m.parameter_count()}, {m.gradients().data(), m.parameter_count()});
  };
  return train_one_rank(model, data, seed, steps, batch, whole, reversed).weights;
}

std::vector<float> train_one_rank_sgd(const GptConfig& config, const Sequences& data, std::uint64_t seed, int steps,
                                      int batch, float lr, DeviceKind where) {
  Gpt model(config, seed, where);
  SgdMomentum sgd{.lr = lr};
  const auto step = [&](Gpt& m) { sgd.update(m.parameters(), m.gradients()); };
  return train_one_rank(model, data, seed, steps, batch, step).weights;
}

OneRankRun train_one_rank(Gpt& model, const Sequences& data, std::uint64_t seed, int steps, int batch,
                          const std::function<void(Gpt&)>& update, bool reversed) {
  OneRankRun out;
  const DistributedSampler sampler(data.count, 1, 0, seed);
  std::vector<int> x, y;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::size_t> picked = batch_of(sampler, s, batch);
    if (reversed) std::reverse(picked.begin(), picked.end());
    fill_batch(data, picked, x, y);
    model.queue_forward(x, y, batch, model.config().max_seq);  // its loss is not read: nothing waits for the device
    model.zero_grad();
    model.backward();
    if (s == 0) out.first_grads = model.gradients().to_host();
    update(model);
  }
  out.weights = model.parameters().to_host();
  return out;
}

}  // namespace labkit

#include "labkit/parallel/equivalence.h"

#include <algorithm>

#include "labkit/parallel/sampler.h"

namespace labkit {

std::vector<float> train_one_rank(const GptConfig& config, const Sequences& data, std::uint64_t seed, int steps,
                                  int batch, const OptimizerUpdate& update, bool reversed) {
  Gpt model(config, seed);
  const DistributedSampler sampler(data.count, 1, 0, seed);
  std::vector<int> x, y;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::size_t> picked = batch_of(sampler, s, batch);
    if (reversed) std::reverse(picked.begin(), picked.end());
    fill_batch(data, picked, x, y);
    model.forward(x, y, batch, config.max_seq);
    model.zero_grad();
    model.backward();
    update({model.parameters().data(), model.parameter_count()}, {model.gradients().data(), model.parameter_count()});
  }
  return model.parameters().to_host();
}

}  // namespace labkit

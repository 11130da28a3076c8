#include "labkit/parallel/sequences.h"

namespace labkit {

Sequences training_sequences(std::uint64_t seed, int T) {
  Sequences s{character_tokens(synthetic_corpus(200000, seed)), T};
  s.count = (s.tokens.ids.size() * 9 / 10 - 1) / T;
  return s;
}

void fill_batch(const Sequences& data, const std::vector<std::size_t>& picked, std::vector<int>& x,
                std::vector<int>& y) {
  const std::size_t T = data.T;
  x.resize(picked.size() * T), y.resize(picked.size() * T);
  for (std::size_t b = 0; b < picked.size(); ++b)
    for (std::size_t t = 0; t < T; ++t) {
      x[b * T + t] = data.tokens.ids[picked[b] * T + t];
      y[b * T + t] = data.tokens.ids[picked[b] * T + t + 1];
    }
}

}  // namespace labkit

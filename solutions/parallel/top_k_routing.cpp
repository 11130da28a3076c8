// STUB: // EXERCISE 9.1
// An MoE router's choice. Each token has a score per expert (its router
// probability, plus DeepSeek-V3's bias when that balances the load) and goes
// to its k highest-scoring experts, best first, a tie to the lower expert.
// Its gates weigh their outputs: the chosen experts' probabilities (not the
// scores), renormalized to sum to 1, as Mixtral does.
//
// Then capacity: walking the assignments in order (token by token, each
// token's choices best first), an expert keeps each while it has room and
// drops it after that. room[e] is what expert e still takes from this rank:
// its capacity less what the ranks before this one sent it.
// STUB: //
// STUB: // Routing (moe.h) holds entry t k + j for token t's j-th choice: expert, gate and
// STUB: // kept (1, or 0 when dropped). Grade it: ./labkit grade moe; run the lab on it: ./labkit mine moe
#include <algorithm>
#include <numeric>

#include "labkit/parallel/moe.h"

namespace labkit {

Routing select_top_k(std::span<const float> scores, std::span<const float> probs, int experts, int k) {
  const int N = int(scores.size()) / experts;
  Routing r{k, std::vector<int>(std::size_t(N) * k), std::vector<float>(std::size_t(N) * k),
            std::vector<std::uint8_t>(std::size_t(N) * k, 1)};
  // BEGIN EXERCISE: for each token, its k highest scores' experts, best first (a tie to the lower
  //       expert), into r.expert; their probabilities over the sum of the k into r.gate.
  // STUB: (void)probs;
  std::vector<int> order(static_cast<std::size_t>(experts));
  for (int t = 0; t < N; ++t) {
    const float* score = scores.data() + std::size_t(t) * experts;
    const float* prob = probs.data() + std::size_t(t) * experts;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
    float sum = 0;
    for (int j = 0; j < k; ++j) sum += prob[order[std::size_t(j)]];
    for (int j = 0; j < k; ++j) {
      r.expert[std::size_t(t) * k + j] = order[std::size_t(j)];
      r.gate[std::size_t(t) * k + j] = prob[order[std::size_t(j)]] / sum;
    }
  }
  // END EXERCISE
  return r;
}

void drop_over_capacity(Routing& r, std::vector<std::int64_t> room) {
  // BEGIN EXERCISE: walk the assignments in order: kept while its expert has room left (taking it), else dropped.
  // STUB: (void)r, (void)room;
  for (std::size_t a = 0; a < r.expert.size(); ++a) {
    std::int64_t& left = room[std::size_t(r.expert[a])];
    r.kept[a] = left > 0;
    if (left > 0) --left;
  }
  // END EXERCISE
}

}  // namespace labkit

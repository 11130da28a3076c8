// EXERCISE 9.1
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
//
// Routing (moe.h) holds entry t k + j for token t's j-th choice: expert, gate and
// kept (1, or 0 when dropped). Grade it: ./labkit grade moe; run the lab on it: ./labkit mine moe
#include <algorithm>
#include <numeric>

#include "labkit/parallel/moe.h"

namespace labkit {

Routing select_top_k(std::span<const float> scores, std::span<const float> probs, int experts, int k) {
  const int N = int(scores.size()) / experts;
  Routing r{k, std::vector<int>(std::size_t(N) * k), std::vector<float>(std::size_t(N) * k),
            std::vector<std::uint8_t>(std::size_t(N) * k, 1)};
  // TODO: for each token, its k highest scores' experts, best first (a tie to the lower
  //       expert), into r.expert; their probabilities over the sum of the k into r.gate.
  (void)probs;
  return r;
}

void drop_over_capacity(Routing& r, std::vector<std::int64_t> room) {
  // TODO: walk the assignments in order: kept while its expert has room left (taking it), else dropped.
  (void)r, (void)room;
}

}  // namespace labkit

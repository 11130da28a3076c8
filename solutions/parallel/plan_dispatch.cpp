// STUB: // EXERCISE 9.2
// Expert parallelism's permutation: where each kept assignment travels and
// where it lands. Rank q holds experts [q E/ep, (q+1) E/ep), so sending every
// assignment to its expert's rank is one all_to_allv: this rank's send buffer
// holds its kept assignments' tokens by expert (and so by rank), each
// expert's in token order, and the buffer it receives holds every rank's
// rows, rank by rank, each rank's by expert. Its experts each need their own
// rows together: expert i's from rank 0, then rank 1, ..., so that an expert
// sees the batch's tokens in the batch's order.
//
// kept (ep x E) is every rank's count of kept assignments per expert (row q
// for rank q), which every rank knows after the counts' all_gather.
// STUB: //
// STUB: // r.kept[a] says whether assignment a (token a / k) was kept, r.expert[a] its expert.
// STUB: // Grade it: ./labkit grade moe; run the lab on it: ./labkit mine moe
#include <numeric>

#include "labkit/parallel/moe.h"

namespace labkit {

DispatchPlan plan_dispatch(const Routing& r, std::span<const std::int64_t> kept, int rank, int ranks) {
  const int E = int(kept.size()) / ranks, local = E / ranks;
  const std::vector<std::int64_t> none(std::size_t(ranks), 0);
  DispatchPlan plan{{}, none, none, {}, std::vector<int>(std::size_t(local) + 1, 0)};
  // BEGIN EXERCISE: send_order: this rank's kept assignments by expert, each expert's in token order;
  //       send_rows[q] and recv_rows[q]: the rows this rank sends rank q and receives from it;
  //       expert_rows: for each of this rank's experts, its rows' places in the received buffer,
  //       rank by rank, with expert_offsets[i] where expert i's begin and the last entry,
  //       expert_offsets[local], their total (expert i runs on offsets[i] .. offsets[i + 1] - 1).
  // STUB: (void)r, (void)rank;
  for (int e = 0; e < E; ++e)
    for (std::size_t a = 0; a < r.expert.size(); ++a)
      if (r.expert[a] == e && r.kept[a]) plan.send_order.push_back(int(a));
  for (int q = 0; q < ranks; ++q)
    for (int i = 0; i < local; ++i) {
      plan.send_rows[std::size_t(q)] += kept[std::size_t(rank) * E + q * local + i];
      plan.recv_rows[std::size_t(q)] += kept[std::size_t(q) * E + rank * local + i];
    }
  for (int i = 0; i < local; ++i) {
    std::int64_t at = 0;  // where rank q's rows begin in the received buffer
    for (int q = 0; q < ranks; ++q) {
      const std::int64_t* from = &kept[std::size_t(q) * E + rank * local];  // rank q's, to this rank's experts
      const std::int64_t first = at + std::accumulate(from, from + i, std::int64_t(0));
      for (std::int64_t n = 0; n < from[i]; ++n) plan.expert_rows.push_back(int(first + n));
      at += plan.recv_rows[std::size_t(q)];
    }
    plan.expert_offsets[std::size_t(i) + 1] = int(plan.expert_rows.size());
  }
  // END EXERCISE
  return plan;
}

}  // namespace labkit

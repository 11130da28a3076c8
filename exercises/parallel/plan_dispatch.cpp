// EXERCISE 9.2
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
//
// r.kept[a] says whether assignment a (token a / k) was kept, r.expert[a] its expert.
// Grade it: ./labkit grade moe; run the lab on it: ./labkit mine moe
#include <numeric>

#include "labkit/parallel/moe.h"

namespace labkit {

DispatchPlan plan_dispatch(const Routing& r, std::span<const std::int64_t> kept, int rank, int ranks) {
  const int E = int(kept.size()) / ranks, local = E / ranks;
  const std::vector<std::int64_t> none(std::size_t(ranks), 0);
  DispatchPlan plan{{}, none, none, {}, std::vector<int>(std::size_t(local) + 1, 0)};
  // TODO: send_order: this rank's kept assignments by expert, each expert's in token order;
  //       send_rows[q] and recv_rows[q]: the rows this rank sends rank q and receives from it;
  //       expert_rows: for each of this rank's experts, its rows' places in the received buffer,
  //       rank by rank, with expert_offsets[i] where expert i's begin and the last entry,
  //       expert_offsets[local], their total (expert i runs on offsets[i] .. offsets[i + 1] - 1).
  (void)r, (void)rank;
  return plan;
}

}  // namespace labkit

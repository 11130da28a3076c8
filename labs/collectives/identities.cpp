// The identities that tie the collectives together (the NCCL User Guide's
// "Collective Operations" defines each): AllReduce == ReduceScatter + AllGather
// (the ring allreduce's two phases, chapter 2) == Reduce + Broadcast, and
// AllGather == Gather + Broadcast; checked element by element on every rank.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "collectives_lab.h"

namespace collectives_lab {

using namespace labkit;

namespace {

using Values = std::vector<float>;

Values iota_from(std::size_t n, float first) {
  Values v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = first + float(i);
  return v;
}

// Each identity on this rank: 1 where both sides came out equal, 0 where not.
std::vector<double> identities_on_this_rank(Comm& comm, std::size_t n) {
  const int p = comm.size(), r = comm.rank();
  Values x = iota_from(n, float((r + 1) * 100));
  Values block = iota_from(2, float(r * 10 + 1));

  Values all_reduce = x;
  comm.all_reduce(view_of(all_reduce), ReduceOp::sum);
  Values shard(n / p), rs_ag(n);
  comm.reduce_scatter(view_of(x), view_of(shard), ReduceOp::sum);
  comm.all_gather(view_of(shard), view_of(rs_ag));
  Values reduce_bcast = x;
  comm.reduce(view_of(reduce_bcast), ReduceOp::sum, 0);
  comm.broadcast(view_of(reduce_bcast), 0);
  Values all_gather(2 * p), gather_bcast(2 * p);
  comm.all_gather(view_of(block), view_of(all_gather));
  comm.gather(view_of(block), view_of(gather_bcast), 0);
  comm.broadcast(view_of(gather_bcast), 0);
  return {double(all_reduce == rs_ag), double(all_reduce == reduce_bcast), double(all_gather == gather_bcast)};
}

}  // namespace

bool check_identities(Comm& comm, nlohmann::json& report) {
  const std::size_t n = 2 * comm.size();  // divisible by P, as reduce_scatter needs
  const std::vector<double> holds = identities_on_this_rank(comm, n);
  const std::vector<std::vector<double>> every_rank = comm.gather_objects(holds);
  bool all_hold = true;
  if (comm.rank() == 0) {
    const char* names[] = {"all_reduce == reduce_scatter + all_gather", "all_reduce == reduce + broadcast",
                           "all_gather == gather + broadcast"};
    fmt::print("identities ({} elements per rank, compared on every rank):\n", n);
    for (int k = 0; k < 3; ++k) {
      std::vector<int> failing;
      for (int q = 0; q < comm.size(); ++q)
        if (every_rank[q][k] == 0) failing.push_back(q);
      all_hold = all_hold && failing.empty();
      fmt::print("  {:<44}{}\n", names[k],
                 failing.empty() ? "holds" : fmt::format("FAILS on ranks {}", fmt::join(failing, ", ")));
      report.push_back({{"identity", names[k]}, {"holds", failing.empty()}, {"failing_ranks", failing}});
    }
  }
  return all_hold && holds == std::vector<double>{1, 1, 1};
}

}  // namespace collectives_lab

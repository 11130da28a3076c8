// The collectives the benchmark sweeps, one entry each. Counts follow
// nccl-tests: the reported count is the receive buffer's for all_gather and
// all_to_all(v), the send buffer's for reduce_scatter, the one buffer's otherwise.
#include <stdexcept>
#include <string>
#include <vector>

#include "collective_bench.h"

namespace labkit::bench {

namespace {
std::size_t same(std::size_t count, int) { return count; }
std::size_t per_rank(std::size_t count, int ranks) { return count / ranks; }

float sum_over_ranks(std::size_t i, int ranks) {
  float s = 0;
  for (int r = 0; r < ranks; ++r) s += value(r, i);
  return s;
}

const CollectiveBench kBenches[] = {
    {Collective::all_reduce, true, same, same, [](int r, std::size_t i, int) { return value(r, i); },
     [](int, std::size_t i, int ranks, std::size_t) { return sum_over_ranks(i, ranks); },
     [](Comm& c, View, View recv) { c.all_reduce(recv, ReduceOp::sum); }},
    {Collective::broadcast, true, same, same, [](int r, std::size_t i, int) { return r == 0 ? value(0, i) : -1.0f; },
     [](int, std::size_t i, int, std::size_t) { return value(0, i); },
     [](Comm& c, View, View recv) { c.broadcast(recv, 0); }},
    {Collective::all_gather, false, per_rank, same, [](int r, std::size_t i, int) { return value(r, i); },
     [](int, std::size_t i, int, std::size_t block) { return value(int(i / block), i % block); },
     [](Comm& c, View send, View recv) { c.all_gather(send, recv); }},
    {Collective::reduce_scatter, false, same, per_rank, [](int r, std::size_t i, int) { return value(r, i); },
     [](int r, std::size_t i, int ranks, std::size_t block) { return sum_over_ranks(r * block + i, ranks); },
     [](Comm& c, View send, View recv) { c.reduce_scatter(send, recv, ReduceOp::sum); }},
    {Collective::all_to_all, false, same, same, [](int r, std::size_t i, int) { return value(r, i); },
     [](int r, std::size_t i, int, std::size_t block) { return value(int(i / block), r * block + i % block); },
     [](Comm& c, View send, View recv) { c.all_to_all(send, recv); }},
    // Even counts, so that it reads beside all_to_all: what the per-peer path costs.
    {Collective::all_to_allv, false, same, same, [](int r, std::size_t i, int) { return value(r, i); },
     [](int r, std::size_t i, int, std::size_t block) { return value(int(i / block), r * block + i % block); },
     [](Comm& c, View send, View recv) {
       const std::vector<std::size_t> blocks(c.size(), send.count / c.size());
       c.all_to_allv(send, blocks, recv, blocks);
     }},
};
}  // namespace

const CollectiveBench& find_bench(std::string_view collective) {
  for (const CollectiveBench& b : kBenches)
    if (name_of(b.op) == collective) return b;
  std::string names;
  for (std::string_view n : bench_names()) names += (names.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument("bench: no collective '" + std::string(collective) + "' (" + names + ")");
}

std::vector<std::string_view> bench_names() {
  std::vector<std::string_view> names;
  for (const CollectiveBench& b : kBenches) names.push_back(name_of(b.op));
  return names;
}

}  // namespace labkit::bench

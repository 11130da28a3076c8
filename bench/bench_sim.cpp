// The simulator's own speed (Google Benchmark): simulated point-to-point
// messages per second of wall time, and a data-carrying ring allreduce of 1 MiB
// per rank over 1024 ranks. Targets: >= 1,000,000 messages/s; the 1024-rank
// allreduce under 2 s on one core.
//
//   ./labkit bench sim      (JSON: add --benchmark_out=out/bench_sim.json)
#include <benchmark/benchmark.h>

#include "labkit/algorithms.h"
#include "labkit/comm.h"
#include "sim/engine.h"

using namespace labkit;

namespace {
sim::Options options(int ranks) { return {.ranks = ranks, .topology = find_topology("dgx-h100")}; }

// Every rank passes a small message around a ring, again and again.
void BM_RingShiftMessages(benchmark::State& state) {
  const int ranks = int(state.range(0)), rounds = 2000;
  std::uint64_t messages = 0;
  for (auto _ : state) {
    sim::Engine engine(options(ranks));
    engine.run([&](Comm& c) {
      std::int64_t out = c.rank(), in = 0;
      const View send{&out, 1, DType::i64}, recv{&in, 1, DType::i64};
      for (int i = 0; i < rounds; ++i) c.sendrecv(send, (c.rank() + 1) % ranks, recv, (c.rank() - 1 + ranks) % ranks);
    });
    messages += engine.messages();
  }
  state.counters["messages/s"] = benchmark::Counter(double(messages), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RingShiftMessages)->Arg(2)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

// 1 MiB of f32 per rank, reduced with ring allreduce over 1024 simulated ranks.
void BM_RingAllReduce1MiB(benchmark::State& state) {
  const int ranks = int(state.range(0));
  const std::size_t count = (1 << 20) / sizeof(float);
  std::vector<std::vector<float>> buffers(ranks, std::vector<float>(count, 1.0f));
  double simulated = 0;
  std::uint64_t messages = 0;
  for (auto _ : state) {
    sim::Engine engine(options(ranks));
    engine.run([&](Comm& c) { ring_all_reduce(c, view_of(buffers[c.rank()]), ReduceOp::sum); });
    simulated = engine.elapsed();
    messages += engine.messages();
  }
  state.counters["messages/s"] = benchmark::Counter(double(messages), benchmark::Counter::kIsRate);
  state.counters["simulated_ms"] = simulated * 1e3;
}
BENCHMARK(BM_RingAllReduce1MiB)->Arg(64)->Arg(1024)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
}  // namespace

BENCHMARK_MAIN();

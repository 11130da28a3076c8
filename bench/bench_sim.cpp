// The simulator's own speed (Google Benchmark): payload-free point-to-point
// messages per second of wall time, and a data-carrying ring allreduce of 1 MiB
// per rank over 1024 ranks, each under both network models side by side (the
// second argument: 0 fair, 1 serial). Targets: >= 1,000,000 messages/s; the
// 1024-rank allreduce under 2 s on one core; fair within 10% of serial in both
// (a ring never puts two messages on one port, so sharing must cost almost
// nothing); and a payload-free pairwise all-to-all of 256 ranks behind 32
// shared NICs, where every flow shares, under 5 s.
//
//   ./labkit bench sim      (JSON: add --benchmark_out=out/bench_sim.json)
#include <benchmark/benchmark.h>

#include "labkit/algorithms.h"
#include "labkit/comm.h"
#include "sim/engine.h"

using namespace labkit;

namespace {
sim::Options options(const benchmark::State& state, const std::string& topology = "dgx-h100") {
  const sim::Network network = state.range(1) == 0 ? sim::Network::fair : sim::Network::serial;
  return {.ranks = int(state.range(0)), .topology = find_topology(topology), .network = network};
}

void name_network(benchmark::State& state) { state.SetLabel(state.range(1) == 0 ? "fair" : "serial"); }

// Every rank passes a small message around a ring, again and again, payload-free.
void BM_RingShiftMessages(benchmark::State& state) {
  const int ranks = int(state.range(0)), rounds = 2000;
  std::uint64_t messages = 0;
  for (auto _ : state) {
    sim::Options o = options(state);
    o.payload = false;  // the engine's own cost per message, nothing copied
    sim::Engine engine(o);
    engine.run([&](Comm& c) {
      std::int64_t out = c.rank(), in = 0;
      const View send{&out, 1, DType::i64}, recv{&in, 1, DType::i64};
      for (int i = 0; i < rounds; ++i) c.sendrecv(send, (c.rank() + 1) % ranks, recv, (c.rank() - 1 + ranks) % ranks);
    });
    messages += engine.messages();
  }
  state.counters["messages/s"] = benchmark::Counter(double(messages), benchmark::Counter::kIsRate);
  name_network(state);
}
BENCHMARK(BM_RingShiftMessages)
    ->ArgsProduct({{2, 64, 1024}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// 1 MiB of f32 per rank, reduced with ring allreduce over 1024 simulated ranks.
void BM_RingAllReduce1MiB(benchmark::State& state) {
  const int ranks = int(state.range(0));
  const std::size_t count = (1 << 20) / sizeof(float);
  std::vector<std::vector<float>> buffers(ranks, std::vector<float>(count, 1.0f));
  double simulated = 0;
  std::uint64_t messages = 0;
  for (auto _ : state) {
    sim::Engine engine(options(state));
    engine.run([&](Comm& c) { ring_all_reduce(c, view_of(buffers[c.rank()]), ReduceOp::sum); });
    simulated = engine.elapsed();
    messages += engine.messages();
  }
  state.counters["messages/s"] = benchmark::Counter(double(messages), benchmark::Counter::kIsRate);
  state.counters["simulated_ms"] = simulated * 1e3;
  name_network(state);
}
BENCHMARK(BM_RingAllReduce1MiB)
    ->ArgsProduct({{64, 1024}, {0, 1}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Pairwise all-to-all, 1 MiB per rank, payload-free, on 32 nodes of 8 ranks
// with one NIC each (the ethernet preset): every inter-node flow shares its NIC.
void BM_PairwiseAllToAllSharedNics(benchmark::State& state) {
  const std::size_t count = (1 << 20) / sizeof(float);
  double simulated = 0;
  std::uint64_t messages = 0;
  for (auto _ : state) {
    sim::Options o = options(state, "ethernet");
    o.payload = false;
    sim::Engine engine(o);
    engine.run([&](Comm& c) {
      const View send{nullptr, count, DType::f32}, recv{nullptr, count, DType::f32};
      pairwise_all_to_all(c, send, recv);
    });
    simulated = engine.elapsed();
    messages += engine.messages();
  }
  state.counters["messages/s"] = benchmark::Counter(double(messages), benchmark::Counter::kIsRate);
  state.counters["simulated_ms"] = simulated * 1e3;
  name_network(state);
}
BENCHMARK(BM_PairwiseAllToAllSharedNics)
    ->ArgsProduct({{256}, {0, 1}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
}  // namespace

BENCHMARK_MAIN();

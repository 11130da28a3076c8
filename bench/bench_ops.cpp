// CPU matmul throughput: labkit's matmul_forward (the training labs' Linear)
// against OpenBLAS's own sgemm on the same shapes, side by side. The labs'
// shapes are tiny-gpt's (B*T = 256 rows, C = 64); the last is GPT-2 small's MLP.
//
//   ./labkit bench ops
#include <random>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>

#include "labkit/ops.h"

namespace {
struct Shape {
  std::vector<float> inp, weight, bias, out;
  int N, C, OC;
  Shape(int n, int c, int oc) : inp(std::size_t(n) * c), weight(std::size_t(oc) * c), bias(oc), out(std::size_t(n) * oc), N(n), C(c), OC(oc) {
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& x : inp) x = u(gen);
    for (float& x : weight) x = u(gen);
    for (float& x : bias) x = u(gen);
  }
};

void report(benchmark::State& state, const Shape& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(labkit::ops::matmul_flops(s.N, s.C, s.OC) * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void BM_LabkitMatmul(benchmark::State& state) {
  Shape s(int(state.range(0)), int(state.range(1)), int(state.range(2)));
  for (auto _ : state) {
    labkit::ops::matmul_forward(s.out.data(), s.inp.data(), s.weight.data(), s.bias.data(), s.N, s.C, s.OC);
    benchmark::DoNotOptimize(s.out.data());
  }
  report(state, s);
}

void BM_OpenBlasSgemm(benchmark::State& state) {  // the same product, no bias: the ceiling
  Shape s(int(state.range(0)), int(state.range(1)), int(state.range(2)));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.N, s.OC, s.C, 1, s.inp.data(), s.C, s.weight.data(), s.C, 0,
                s.out.data(), s.OC);
    benchmark::DoNotOptimize(s.out.data());
  }
  report(state, s);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({256, 64, 192})->Args({256, 64, 256})->Args({256, 256, 64})->Args({256, 64, 30})->Args({1024, 768, 3072});
}
BENCHMARK(BM_LabkitMatmul)->Apply(shapes);
BENCHMARK(BM_OpenBlasSgemm)->Apply(shapes);
}  // namespace

BENCHMARK_MAIN();

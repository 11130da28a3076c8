// What every sweep shares (bench_collective, calibrate): its flags and its timing loop.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "collective_bench.h"
#include "labkit/tensor.h"
#ifdef LABKIT_HAVE_MPI
#include "bare_ring_mpi.h"
#endif

namespace labkit::bench {

void add_sweep_options(CLI::App& app, std::string& min_bytes, std::string& max_bytes, Settings& s) {
  app.add_option("-b,--minbytes", min_bytes, "smallest message")->capture_default_str();
  app.add_option("-e,--maxbytes", max_bytes, "largest message")->capture_default_str();
  app.add_option("-f,--stepfactor", s.factor, "size multiplier")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("-n,--iters", s.iters, "timed calls per size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-w,--warmup_iters", s.warmup, "untimed calls first")->capture_default_str();
}

double memcpy_bandwidth() {
  std::vector<char> from(256 << 20, 1), to(from.size());
  std::memcpy(to.data(), from.data(), from.size());  // touch the pages first
  const auto start = std::chrono::steady_clock::now();
  constexpr int kCopies = 4;
  for (int i = 0; i < kCopies; ++i) std::memcpy(to.data(), from.data(), from.size());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return double(from.size()) * kCopies / seconds;
}

std::pair<double, std::int64_t> measure(Comm& comm, const CollectiveBench& b, const std::string& algo,
                                        std::size_t count, const Settings& s) {
  const int P = comm.size(), r = comm.rank();
  // The buffers live where the backend moves data from: the GPU for NCCL.
  Tensor send({b.send_count(count, P)}, s.where), recv({b.recv_count(count, P)}, s.where);
  Tensor& data = b.in_place ? recv : send;
  const View send_view{send.data(), send.size(), DType::f32}, recv_view{recv.data(), recv.size(), DType::f32};
  auto fill = [&] {
    std::vector<float> values(data.size());
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = b.input(r, i, P);
    data.device().copy_from_host(data.data(), values.data(), data.bytes());
  };
  auto call = [&] {
#ifdef LABKIT_HAVE_MPI
    if (algo == "baseline") return bare_ring_all_reduce(recv.data(), recv.size(), MPI_COMM_WORLD);
#endif
    b.call(comm, send_view, recv_view);
  };
  fill();
  for (int i = 0; i < s.warmup; ++i) call();
  comm.barrier();
  const double start = comm.now();
  for (int i = 0; i < s.iters; ++i) call();
  std::vector<double> mine = {(comm.now() - start) / s.iters, 0};
  if (s.check) {
    fill();
    call();
    const std::size_t block = count / P;
    const std::vector<float> got = recv.to_host();
    for (std::size_t i = 0; i < got.size(); ++i) mine[1] += got[i] != b.expected(r, i, P, block);
  } else {
    mine[1] = -1;
  }
  double slowest = 0, wrong = 0;
  for (const std::vector<double>& row : comm.inspect(view_of(mine))) {
    slowest = std::max(slowest, row[0]);
    wrong += row[1];
  }
  return {slowest, s.check ? std::int64_t(wrong) : -1};
}

}  // namespace labkit::bench

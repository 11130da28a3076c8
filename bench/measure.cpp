// What every sweep shares (bench_collective, calibrate): its flags and its timing loop.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "collective_bench.h"
#include "labkit/algorithms.h"
#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/run.h"
#include "labkit/tensor.h"
#include "labkit/units.h"
#ifdef LABKIT_HAVE_MPI
#include "bare_ring_mpi.h"
#endif

namespace labkit::bench {

void add_sweep_options(CLI::App& app, std::string& min_bytes, std::string& max_bytes, Settings& s) {
  app.add_option("-b,--minbytes", min_bytes, "smallest message")->capture_default_str()->check(cli::byte_size(1));
  app.add_option("-e,--maxbytes", max_bytes, "largest message")->capture_default_str()->check(cli::byte_size(1));
  app.add_option("-f,--stepfactor", s.factor, "size multiplier")
      ->capture_default_str()->check(cli::in_range(2, 1 << 20));
  app.add_option("-n,--iters", s.iters, "timed calls per size")->capture_default_str()->check(cli::at_least(1));
  app.add_option("-w,--warmup_iters", s.warmup, "untimed calls first")->capture_default_str()->check(cli::at_least(0));
  app.add_option_function<std::string>(
         "-d,--datatype", [&s](const std::string& name) { s.dtype = parse_dtype(name); },
         "element type: f32, f64, i32, i64, bf16 or u8")
      ->default_str(std::string(name_of(s.dtype)))
      ->check(cli::parsed_by([](const std::string& name) { parse_dtype(name); }));
  app.add_option("-R,--rounds", s.rounds,
                 "passes over every size, the algorithms in turn; each time is its fastest pass's (one on the simulator)")
      ->capture_default_str()
      ->check(cli::at_least(1));
}

void set_sizes(Settings& s, const std::string& min_bytes, const std::string& max_bytes) {
  s.min_bytes = parse_bytes(min_bytes);
  s.max_bytes = parse_bytes(max_bytes);
  if (s.min_bytes > s.max_bytes) throw Error("--minbytes " + min_bytes + " is larger than --maxbytes " + max_bytes);
}

void refuse_one_simulated_rank(const RunOptions& run) {
  if (run.backend == "sim" && run.ranks == 1)
    throw Error("--ranks 1: a collective on one simulated rank moves nothing and takes no time, so it has no "
                "bandwidth to time (--ranks 2 or more)");
}

std::vector<std::size_t> counts_of(const Settings& s, int ranks) {
  std::vector<std::size_t> counts;
  for (std::size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= s.factor) {
    std::size_t count = bytes / size_of(s.dtype);
    count -= count % ranks;
    if (count > 0) counts.push_back(count);
    if (bytes > s.max_bytes / s.factor) break;  // the next size would wrap past 2^64
  }
  if (counts.empty())
    throw Error(fmt::format("--minbytes {} --maxbytes {}: no size holds a whole {} for each of the {} ranks (the "
                            "smallest that does is {} bytes)",
                            s.min_bytes, s.max_bytes, name_of(s.dtype), ranks, size_of(s.dtype) * std::size_t(ranks)));
  return counts;
}

double memcpy_bandwidth() {
  Tensor from({64 << 20}), to({64 << 20});  // 256 MiB each, zeroed (so touched), in the benchmark buffers' pages
  const auto start = std::chrono::steady_clock::now();
  constexpr int kCopies = 4;
  for (int i = 0; i < kCopies; ++i) std::memcpy(to.data(), from.data(), from.bytes());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return double(from.bytes()) * kCopies / seconds;
}

namespace {
// As nccl-tests: the buffers are allocated once, for the largest size that moves
// data, and each size is timed on their first elements. They live where the
// backend moves data from: the GPU for NCCL. A rank's input does not depend on
// the size, so it is made once too, and each size copies its first elements in.
// A Tensor holds floats: a buffer of another dtype is sized in floats, rounded up.
struct Buffers {
  Tensor send, recv;
  std::vector<std::byte> input;  // this rank's, for the largest size, in the dtype, on the host
};

Tensor buffer_of(std::size_t count, DType dtype, DeviceKind where) {
  return Tensor({(count * size_of(dtype) + sizeof(float) - 1) / sizeof(float)}, where);
}

// One size of one algorithm: warm up, time, check. On rank 0, the slowest rank's
// seconds per call and the wrong elements over all ranks (-1: unchecked).
Timing measure(Comm& comm, const CollectiveBench& b, [[maybe_unused]] const std::string& algo, std::size_t count,
               const Settings& s, Buffers& buffers) {
  const int P = comm.size(), r = comm.rank();
  const bool moves_data = count * size_of(s.dtype) <= s.data_max_bytes;
  const View send{moves_data ? buffers.send.data() : nullptr, b.send_count(count, P), s.dtype},
      recv{moves_data ? buffers.recv.data() : nullptr, b.recv_count(count, P), s.dtype};
  const View data = b.in_place ? recv : send;
  const Device& device = buffers.recv.device();
  auto fill = [&] {
    if (moves_data) device.copy_from_host(data.data, buffers.input.data(), data.bytes());
  };
  auto call = [&] {
#ifdef LABKIT_HAVE_MPI
    if (algo == "baseline") return bare_ring_all_reduce(static_cast<float*>(recv.data), recv.count, MPI_COMM_WORLD);
#endif
    b.call(comm, send, recv);
  };
  fill();
  for (int i = 0; i < s.warmup; ++i) call();
  comm.barrier();
  const double start = comm.now();
  for (int i = 0; i < s.iters; ++i) call();
  const bool check = s.check && moves_data;
  struct Measured {
    double seconds;      // per call
    std::int64_t wrong;  // elements off what the collective must give
  } mine{(comm.now() - start) / s.iters, 0};
  if (check) {
    fill();
    call();
    const std::size_t block = count / P;
    std::vector<std::byte> got(recv.bytes());
    device.copy_to_host(got.data(), recv.data, recv.bytes());
    for (std::size_t i = 0; i < recv.count; ++i)
      mine.wrong += load_element(s.dtype, got.data(), i) != b.expected(r, i, P, block);
  }
  double slowest = 0;
  std::int64_t wrong = 0;
  for (const Measured& m : comm.gather_object(mine)) {
    slowest = std::max(slowest, m.seconds);
    wrong += m.wrong;
  }
  return {slowest, check ? wrong : -1};
}

// A reduction's check sums every rank's value(), at most 10 each: exact while
// the sum stays among the integers the type holds exactly.
void check_exact_sums(const CollectiveBench& b, const Settings& s, int P, bool checked) {
  const bool sums = b.op == Collective::all_reduce || b.op == Collective::reduce_scatter || b.op == Collective::reduce;
  const double exact = s.dtype == DType::bf16 ? 256 : s.dtype == DType::u8 ? 255 : 16777216;  // f32's 2^24 at least
  if (s.check && checked && sums && 10.0 * P > exact)
    throw Error(fmt::format("-d {} on {} ranks: the check sums every rank's values (up to 10 each), past {}, the "
                            "integers {} holds exactly; it checks at most {} ranks (-c 0 times without checking)",
                            name_of(s.dtype), P, exact, name_of(s.dtype), int(exact / 10)));
}
}  // namespace

Timings sweep(Comm& comm, const CollectiveBench& b, const std::vector<std::string>& algos,
              const std::vector<std::size_t>& counts, const Settings& s,
              const std::function<void(int pass, std::size_t count)>& progress) {
  std::size_t largest = 0;  // that moves data
  for (std::size_t count : counts)
    if (count * size_of(s.dtype) <= s.data_max_bytes) largest = std::max(largest, count);
  const int P = comm.size();
  check_exact_sums(b, s, P, largest > 0);
  const std::size_t input_count = b.in_place ? b.recv_count(largest, P) : b.send_count(largest, P);
  Buffers buffers{buffer_of(b.send_count(largest, P), s.dtype, s.where),
                  buffer_of(b.recv_count(largest, P), s.dtype, s.where),
                  std::vector<std::byte>(input_count * size_of(s.dtype))};
  for (std::size_t i = 0; i < input_count; ++i) store_element(s.dtype, buffers.input.data(), i, b.input(comm.rank(), i, P));
  Timings best;
  for (int pass = 0; pass < s.rounds; ++pass)
    for (std::size_t count : counts) {
      for (std::size_t i = 0; i < algos.size(); ++i) {
        const std::string& algo = algos[(i + pass) % algos.size()];  // none always goes first
        if (algo != "baseline") use_algorithm(comm, b.op, algo);
        const Timing t = measure(comm, b, algo, count, s, buffers);
        auto [it, first] = best.try_emplace({algo, count}, t);
        it->second = {std::min(it->second.seconds, t.seconds), std::max(it->second.wrong, t.wrong)};
      }
      if (progress && comm.rank() == 0) progress(pass, count);
    }
  return best;
}

}  // namespace labkit::bench

// What the collective benchmark needs to know of each collective, as nccl-tests
// keeps it in one small file per collective (all_reduce.cu, all_gather.cu, ...):
// how many elements each buffer holds for a message of `count` elements, what
// rank r's input element i is, what its output element i must be, and how to
// call it. The harness (bench_collective.cpp) does the rest.
#pragma once

#include <cstdint>
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "labkit/comm.h"
#include "labkit/device.h"

namespace CLI {
class App;  // CLI11's, from <CLI/CLI.hpp> where options are added
}

namespace labkit {
struct RunOptions;  // labkit/run.h
}

namespace labkit::bench {

struct CollectiveBench {
  Collective op;
  bool in_place;  // the Comm call works in place (one buffer), or out of place
  // Elements of the send and receive buffers when `count` elements is the size
  // nccl-tests reports (its "count" column) on `ranks` ranks.
  std::size_t (*send_count)(std::size_t count, int ranks);
  std::size_t (*recv_count)(std::size_t count, int ranks);
  float (*input)(int rank, std::size_t i, int ranks);
  // block: the count / ranks elements that one rank contributes or receives.
  float (*expected)(int rank, std::size_t i, int ranks, std::size_t block);
  void (*call)(Comm& comm, View send, View recv);
};

// Small integers, so sums are exact in every dtype and a misplaced block shows
// (bf16 holds integers exactly up to 256: sums of up to 25 ranks' values).
inline float value(int rank, std::size_t i) { return float((rank * 7 + i) % 11); }

const CollectiveBench& find_bench(std::string_view collective);  // throws naming the ones there are
std::vector<std::string_view> bench_names();

// A sweep, in nccl-tests' terms.
struct Settings {
  std::size_t min_bytes = 8, max_bytes = 32 << 20;
  int factor = 2, iters = 20, warmup = 5;
  int rounds = 1;  // passes over every size and algorithm; each one's fastest counts
  bool check = true;
  DType dtype = DType::f32;
  // Larger sizes move no data (meta views: the simulator's what-if sizes,
  // too big to hold for every rank), so they are timed but not checked.
  std::size_t data_max_bytes = SIZE_MAX;
  DeviceKind where = DeviceKind::cpu;  // where the buffers live: cuda under --backend nccl
};

// nccl-tests' sweep flags: -b and -e (sizes, parsed later), -f, -n, -w, -d; and -R, rounds.
void add_sweep_options(CLI::App& app, std::string& min_bytes, std::string& max_bytes, Settings& s);
// -b and -e into s; throws unless -b <= -e.
void set_sizes(Settings& s, const std::string& min_bytes, const std::string& max_bytes);
// One simulated rank: a collective there moves nothing and takes no virtual
// time, so its bandwidth would be infinite. Refused (a process under mpirun
// takes its real time, and nccl-tests' busbw of 0).
void refuse_one_simulated_rank(const RunOptions& run);
// The element counts from -b to -e, times -f: whole blocks per rank, as nccl-tests aligns them.
std::vector<std::size_t> counts_of(const Settings& s, int ranks);

// How one algorithm did at one size: on rank 0, the slowest rank's seconds per
// call and the wrong elements over all ranks (-1: unchecked).
struct Timing {
  double seconds;
  std::int64_t wrong;
};

// Every count (elements) of every algorithm ("native", a labkit algorithm, or
// "baseline", the bare MPI ring), each warmed up, timed and checked, in s.rounds
// passes over the counts with the algorithms in turn at each (a different one
// first each pass). What is compared is measured side by side, and a slow spell
// on a shared machine slows one pass, spread over every size, instead of one
// size or one algorithm. Each one's fastest pass counts, and a wrong element in
// any pass. Keyed by (algorithm, count); rank 0's is the result. progress(pass,
// count) is called on rank 0 after each size.
using Timings = std::map<std::pair<std::string, std::size_t>, Timing>;
Timings sweep(Comm& comm, const CollectiveBench& b, const std::vector<std::string>& algos,
              const std::vector<std::size_t>& counts, const Settings& s,
              const std::function<void(int pass, std::size_t count)>& progress = {});

// Bytes a second one core copies through memory on this host.
double memcpy_bandwidth();

}  // namespace labkit::bench

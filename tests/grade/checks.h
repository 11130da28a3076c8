// What every grade test needs: inputs that depend on rank and index (so a block
// delivered to the wrong place shows), a watched simulator run that keeps what
// each rank sent, and a Sweep that checks one property over many
// configurations and summarises the failures in the learner's terms.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "labkit/comm.h"
#include "labkit/trace.h"

namespace labkit::grade {

using Buffers = std::vector<std::vector<float>>;  // one per rank

inline float input(int rank, std::size_t i) { return float((rank + 1) * 1000 + i % 1000); }

std::vector<float> inputs(int rank, std::size_t n);

// "rank 2, element 5 (block 1, element 1 of it): expected 3005, got 1005", or "" if none.
std::string first_mismatch(const Buffers& got, std::size_t n, const std::function<float(int, std::size_t)>& expected,
                           std::size_t block = 0);

// ---- a watched run on the simulator -----------------------------------------

struct Posted {
  bool is_send;
  int peer;
  View buf;  // where the bytes came from (send) or went to (receive)
};

struct Observed {
  std::unique_ptr<Trace> trace;
  double elapsed = 0;
  std::vector<std::vector<Posted>> posted;  // per rank, in the order posted
  std::string error;     // what the run threw (a deadlock, a size mismatch), or ""
  std::string native;    // the first collective called through Comm ("all_reduce"), or ""

  std::vector<Posted> sends(int rank) const;
  std::vector<Posted> recvs(int rank) const;

 private:
  std::vector<Posted> posted_by(int rank, bool is_send) const;
};

// Runs fn on P simulated ranks; never throws (see Observed::error).
Observed run_ranks(int p, const std::function<void(Comm&)>& fn, const std::string& topology = "dgx-h100");

// Which of `parts` chunks of `base` (chunk_range's split of `count` elements)
// `buf` is: its index, or -1 if it is not exactly one of them.
int chunk_index(const void* base, std::size_t count, int parts, const View& buf);

// ---- one property over many configurations ------------------------------------

struct Config {
  int p = 0;              // ranks (0: not a communication exercise)
  std::size_t count = 0;  // elements per rank
  std::string label;      // "P=4, count=5, op=sum"
  int root = -1;          // the root, for a rooted collective
};

class Sweep {
 public:
  enum class Checks { values, pattern };
  // A pattern sweep marks its test: if it fails, the exercise earns nothing.
  explicit Sweep(std::string exercise, Checks checks = Checks::values);

  // Checks one configuration: `check` returns what is wrong ("" when right). An
  // exception (a deadlock, a size mismatch, the learner's own) is that
  // configuration's failure, with its message.
  void check(const Config& config, const std::function<std::string()>& check);
  // Adds a GoogleTest failure if any configuration failed: where it fails and
  // where it passes (with what the failing ones share), the first failures in
  // detail, and the hint.
  void report(const std::string& hint) const;

 private:
  std::string exercise_;
  std::vector<std::pair<Config, std::string>> failed_;
  std::vector<Config> passed_;
};

// What a run that called a collective gets told, or "" if it called none.
std::string native_called(const Observed& run);
// What stops a run's values from counting: a native collective called, or what
// the run threw (with a hint); "" if neither.
std::string run_problem(const Observed& run);

}  // namespace labkit::grade

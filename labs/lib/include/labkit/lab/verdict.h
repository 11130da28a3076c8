// labkit::lab::Verdict — how a training lab ends: each criterion its run
// missed, named, or the sentence that says what held.
//
//   lab::Verdict verdict;
//   verdict.within("naive: weights", weights, limit);  // "naive: weights 1.2e-03 from one rank's, past 9.0e-04"
//   verdict.require(r.ranks_agree, "naive: ranks' weights differ");
//   int status = verdict.print("equal to one rank: ...");  // or "MISMATCH: a; b", and exit status 1
//   report["verdict"] = verdict.json();                  // {"passed": false, "misses": ["a", "b"]}
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace labkit::lab {

class Verdict {
 public:
  // A miss unless `difference` <= `limit` (NaN and infinity miss: the run diverged).
  void within(std::string_view what, double difference, double limit);
  // A miss unless `holds`, in `missed`'s words.
  void require(bool holds, std::string missed);
  // A miss where a step's loss (`losses`, by step) is not finite: the run
  // diverged, and the other criteria say nothing then ("naive: loss inf at
  // step 3: the run diverged (lower --lr)"; `what` may be empty).
  template <class Losses> void trained(std::string_view what, const Losses& losses) {
    for (std::size_t s = 0; s < losses.size(); ++s)
      if (!std::isfinite(double(losses[s]))) return diverged(what, double(losses[s]), s);
  }

  bool passed() const { return missed_.empty() && diverged_.empty(); }
  // Prints `held` when nothing was missed, else "MISMATCH: " and every miss
  // (a diverged run's alone); returns the exit status.
  int print(std::string_view held) const;
  // For --json: whether it passed, and what print() lists where it did not.
  nlohmann::json json() const;

 private:
  void diverged(std::string_view what, double loss, std::size_t step);
  const std::vector<std::string>& misses() const;  // a diverged run's alone
  std::vector<std::string> missed_, diverged_;
};

}  // namespace labkit::lab

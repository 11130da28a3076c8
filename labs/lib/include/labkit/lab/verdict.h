// labkit::lab::Verdict — how a training lab ends: each criterion its run
// missed, named, or the sentence that says what held.
//
//   lab::Verdict verdict;
//   verdict.within("naive: weights", weights, limit);  // "naive: weights 1.2e-03 from one rank's, past 9.0e-04"
//   verdict.require(r.ranks_agree, "naive: ranks' weights differ");
//   return verdict.print("equal to one rank: ...");    // or "MISMATCH: a; b", and exit status 1
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace labkit::lab {

class Verdict {
 public:
  // A miss unless `difference` <= `limit` (NaN and infinity miss: the run diverged).
  void within(std::string_view what, double difference, double limit);
  // A miss, in `missed`'s words, unless `holds`.
  void require(bool holds, std::string missed);

  bool passed() const { return missed_.empty(); }
  // Prints `held` when nothing was missed, else "MISMATCH: " and every miss; returns the exit status.
  int print(std::string_view held) const;

 private:
  std::vector<std::string> missed_;
};

}  // namespace labkit::lab

#include "labkit/lab/verdict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/parallel/equivalence.h"

namespace labkit::lab {

void Verdict::within(std::string_view what, double difference, double limit) {
  if (!(difference <= limit)) missed_.push_back(failed_criterion(what, difference, limit));
}

void Verdict::require(bool holds, std::string missed) {
  if (!holds) missed_.push_back(std::move(missed));
}

int Verdict::print(std::string_view held) const {
  if (passed())
    fmt::print("{}\n", held);
  else
    fmt::print("MISMATCH: {}\n", fmt::join(missed_, "; "));
  return passed() ? 0 : 1;
}

}  // namespace labkit::lab

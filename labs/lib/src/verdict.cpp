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

void Verdict::diverged(std::string_view what, double loss, std::size_t step) {
  diverged_.push_back(fmt::format("{}{}loss {} at step {}: the run diverged (lower --lr)", what,
                                  what.empty() ? "" : ": ", std::isnan(loss) ? "nan" : fmt::format("{}", loss), step));
}

const std::vector<std::string>& Verdict::misses() const { return diverged_.empty() ? missed_ : diverged_; }

int Verdict::print(std::string_view held) const {
  if (passed())
    fmt::print("{}\n", held);
  else
    fmt::print("MISMATCH: {}\n", fmt::join(misses(), "; "));
  return passed() ? 0 : 1;
}

nlohmann::json Verdict::json() const { return {{"passed", passed()}, {"misses", misses()}}; }

}  // namespace labkit::lab

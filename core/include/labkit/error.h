#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace labkit {

// Every misuse is reported as "rank R: op: what is wrong with which argument".
// `who` is the rank as the learner knows it ("rank 2", or "rank 1 of group 3 (global rank 6)").
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A rank stopped (--fail-rank on the simulator, a killed process under mpirun):
// thrown at each rank that needs it, naming that rank, its pending operation and
// the rank that failed: "rank 0: recv(from=1, tag=0): rank 1 failed at t = 10.0 us".
struct RankFailedError : Error {
  using Error::Error;
};

template <class... Args>
[[noreturn]] void fail(std::string_view who, std::string_view op, fmt::format_string<Args...> what,
                       Args&&... args) {
  throw Error(fmt::format("{}: {}: {}", who, op, fmt::format(what, std::forward<Args>(args)...)));
}

}  // namespace labkit

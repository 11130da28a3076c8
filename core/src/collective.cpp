#include "labkit/collective.h"

#include <stdexcept>
#include <string>

namespace labkit {

namespace {
constexpr std::array kNames = {"broadcast",  "reduce",         "all_reduce", "gather", "scatter",
                               "all_gather", "reduce_scatter", "all_to_all", "barrier"};
}

std::string_view name_of(Collective c) { return kNames[static_cast<int>(c)]; }

Collective parse_collective(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i)
    if (name == kNames[i]) return static_cast<Collective>(i);
  std::string names;
  for (std::string_view n : kNames) names += (names.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument("unknown collective '" + std::string(name) + "' (" + names + ")");
}

bool has_root(Collective c) {
  return c == Collective::broadcast || c == Collective::reduce || c == Collective::gather ||
         c == Collective::scatter;
}

bool has_reduce_op(Collective c) {
  return c == Collective::reduce || c == Collective::all_reduce || c == Collective::reduce_scatter;
}

}  // namespace labkit

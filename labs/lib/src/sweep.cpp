#include "labkit/lab/sweep.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace labkit::cli {

std::string sweep_flag(const Sweep& sweep) {
  return fmt::format("--sweep {}={:g}..{:g}", sweep.over, sweep.from, sweep.to);
}

Sweep parse_sweep(const std::string& text, const std::vector<SweepAxis>& axes) {
  const std::size_t equals = text.find('='), dots = text.find("..");
  if (equals != std::string::npos && dots != std::string::npos && dots > equals) {
    const std::string over = text.substr(0, equals);
    double from = 0, to = 0;
    std::size_t used_from = 0, used_to = 0;
    try {
      from = std::stod(text.substr(equals + 1, dots - equals - 1), &used_from);
      to = std::stod(text.substr(dots + 2), &used_to);
    } catch (const std::exception&) {
      used_from = 0;
    }
    const bool numbers = used_from > 0 && used_from == dots - equals - 1 && used_to == text.size() - dots - 2;
    for (const SweepAxis& a : axes) {
      if (!numbers || over != a.name || to < from || to > a.max) continue;
      if (a.whole ? from >= a.min && from == std::floor(from) && to == std::floor(to) : from > a.min)
        return {over, from, to};
    }
  }
  std::string forms;
  for (const SweepAxis& a : axes)
    forms += fmt::format("{}{}=A..B ({}{} {} A <= B <= {:g}{})", forms.empty() ? "" : " or ", a.name,
                         a.whole ? "whole numbers, " : "", a.min, a.whole ? "<=" : "<", a.max, a.unit);
  throw std::invalid_argument(fmt::format("'{}' is not {}", text, forms));
}

}  // namespace labkit::cli

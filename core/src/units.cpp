#include "labkit/units.h"

#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace labkit {

namespace {
// Three significant digits: 1.23, 12.3, 123.
std::string three_digits(double v, const char* unit) {
  const int decimals = v >= 100 ? 0 : v >= 10 ? 1 : 2;
  return fmt::format("{:.{}f} {}", v, decimals, unit);
}

// Engineering notation, three significant digits and an exponent that is a
// multiple of 3: "1.00e+300 s", "12.0e-15 s". Taken from "{:.2e}" (d.dde+X,
// rounded once) by moving the point X mod 3 places right, so it holds from the
// smallest subnormal to the largest double, where scaling by a power of ten
// would overflow.
std::string engineering(double v, const char* unit) {
  std::string text = fmt::format("{:.2e}", std::fabs(v));  // "1.23e+05"
  const int exponent = std::stoi(text.substr(5));
  const int shift = ((exponent % 3) + 3) % 3;
  const std::string digits = text.substr(0, 1) + text.substr(2, 2);  // "123"
  const std::size_t point = std::size_t(1 + shift);                      // "1.23", "12.3" or "123"
  return fmt::format("{}{}{}{}e{:+03d} {}", v < 0 ? "-" : "", digits.substr(0, point), point < 3 ? "." : "",
                     digits.substr(point), exponent - shift, unit);
}
}  // namespace

std::string format_seconds(double s) {
  const double a = std::fabs(s);
  if (a == 0) return "0 s";
  if (!std::isfinite(s)) return fmt::format("{} s", s);
  if (a < 1e-12 || a >= 1e6) return engineering(s, "s");  // below 0.001 ns, or past six digits of seconds
  if (a < 1e-6) return three_digits(s * 1e9, "ns");
  if (a < 1e-3) return three_digits(s * 1e6, "us");
  if (a < 1) return three_digits(s * 1e3, "ms");
  return three_digits(s, "s");
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::array units = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};  // 2^64 B is 16 EiB
  double v = double(bytes);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < units.size()) {
    v /= 1024;
    ++u;
  }
  if (v == std::floor(v)) return fmt::format("{:.0f} {}", v, units[u]);
  return three_digits(v, units[u]);
}

std::uint64_t parse_bytes(const std::string& text) {
  const std::string too_large = "'" + text + "' is too large a size";
  std::size_t used = 0;
  std::uint64_t value = 0;
  try {
    if (text.find('-') == std::string::npos) value = std::stoull(text, &used);  // stoull would wrap "-1"
  } catch (const std::out_of_range&) {
    throw std::invalid_argument(too_large);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0) throw std::invalid_argument("'" + text + "' is not a size (examples: 1024, 4K, 1M, 2G)");
  const std::string suffix = text.substr(used);
  int shift = 0;
  if (suffix == "K" || suffix == "KiB") shift = 10;
  else if (suffix == "M" || suffix == "MiB") shift = 20;
  else if (suffix == "G" || suffix == "GiB") shift = 30;
  else if (!suffix.empty() && (suffix[0] == '.' || suffix[0] == 'e' || suffix[0] == 'E'))
    throw std::invalid_argument("'" + text + "' is not a whole number of bytes (1536K, not 1.5M)");
  else if (!suffix.empty() && suffix != "B")
    throw std::invalid_argument("'" + text + "' has an unknown unit (use K, M or G)");
  if (value > std::numeric_limits<std::uint64_t>::max() >> shift) throw std::invalid_argument(too_large);
  return value << shift;
}

double parse_seconds(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  const double scale = unit == "ns" ? 1e-9 : unit == "us" ? 1e-6 : unit == "ms" ? 1e-3 : unit == "s" || unit.empty() ? 1 : 0;
  if (used == 0 || scale == 0 || !std::isfinite(value))
    throw std::invalid_argument("'" + text + "' is not a time (examples: 0, 500ns, 10us, 1.5ms, 2s)");
  if (value < 0) throw std::invalid_argument("'" + text + "' is negative: a time is 0 or more");
  return value * scale;
}

}  // namespace labkit

// labkit::cli — the checks every program puts on its options (the launcher's
// --backend, --ranks, --trace, ...; the labs, bench/, the grader, the
// visualizer), so that a bad value is refused on one line naming the option,
// the value and what is allowed:
//
//   error: --seq: -5 is out of range (must be >= 1)
//   error: --tp: 2.5 is not a whole number (must be >= 1)
//   error: --model: unknown model 'llama9' (gpt2, gpt2-medium, ...)
//
// CLI11's own Range and PositiveNumber print DBL_MAX in full ("Value 0 not in
// range 0.000000 to 1797693134862315708145...") and let nan through. Each
// check's description ("(>= 1)") shows in --help after the option's type,
// where tests/options_test.cpp reads it to try the values just outside. The
// checks only labs use are the lab library's (labkit/lab/option_checks.h).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace labkit::cli {

namespace detail {
// Plain decimal digits ("-12", "0", not "010", "1e3" or "0x10"), within T's
// range: CLI11 then converts with strtoll in base 0, where 010 is octal 8, -1
// wraps for an unsigned option and 2^64 saturates.
template <class T>
bool whole_number(const std::string& text, T& value) {
  const std::size_t digits = text.starts_with('-') ? 1 : 0;
  if (text.size() == digits || (text[digits] == '0' && text.size() > digits + 1) ||
      text.find_first_not_of("0123456789", digits) != std::string::npos)
    return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

// A T in [min, max], or in (min, max] when `above`; nan and inf are refused.
template <class T>
CLI::Validator number(T min, bool above, T max, const std::string& allowed) {
  return {[=](std::string& text) -> std::string {
            const char* const end = text.data() + text.size();
            double d = 0;  // what the text says, to tell why a T cannot hold it
            const auto [used, error] = std::from_chars(text.data(), end, d);
            // Past the type's top, that top too: "1e12 is out of range (must be >= 1)" read as a contradiction.
            const bool past_the_type = max == std::numeric_limits<T>::max() && std::isfinite(d) &&
                                       (d > double(max) || (error == std::errc::result_out_of_range && d > 0));
            const auto refuse = [&](const char* why) {
              return past_the_type ? fmt::format("{} {} (must be {}, at most {})", text, why, allowed, max)
                                   : fmt::format("{} {} (must be {})", text, why, allowed);
            };
            if (text.empty() || used != end || std::isnan(d) ||
                (error != std::errc() && error != std::errc::result_out_of_range))
              return refuse("is not a number");
            T value{};
            if constexpr (std::is_integral_v<T>) {
              if (!whole_number(text, value)) {
                if (error != std::errc() || d < double(std::numeric_limits<T>::lowest()) ||
                    d > double(std::numeric_limits<T>::max()))
                  return refuse("is out of range");
                return refuse(d == std::floor(d) ? "is not a whole number in plain digits" : "is not a whole number");
              }
            } else {
              if (std::from_chars(text.data(), end, value).ec != std::errc() || !std::isfinite(value))
                return refuse("is out of range");
            }
            if (value < min || (above && value == min) || value > max) return refuse("is out of range");
            return "";
          },
          "(" + allowed + ")"};
}
}  // namespace detail

// Numbers. The bound's type must be the option's, as the number is read as one:
// at_least(1) for an int, at_least(std::uint64_t(0)) for a seed, above(0.0)
// for a double, above(0.0f) for a float (1e39 is out of its range).
template <class T>
CLI::Validator at_least(T min) {
  return detail::number(min, false, std::numeric_limits<T>::max(), fmt::format(">= {}", min));
}
template <class T>
CLI::Validator in_range(T min, T max) {
  return detail::number(min, false, max, fmt::format("{} to {}", min, max));
}
// Greater than min (and at most max, when given): above(0.0, 1.0) is a fraction.
template <class T>
CLI::Validator above(T min, T max = std::numeric_limits<T>::max()) {
  return detail::number(min, true, max, max == std::numeric_limits<T>::max() ? fmt::format("> {}", min)
                                                                           : fmt::format("> {} and <= {}", min, max));
}

// Names: one of `names`; refused as "unknown WHAT 'x' (a, b, c)", as core's parsers word it.
CLI::Validator one_of(const std::string& what, const std::vector<std::string>& names);

// Anything with a parser that throws on bad input (a preset, a file, a spec):
// good when `parse` accepts it, and its message says why not.
CLI::Validator parsed_by(std::function<void(const std::string&)> parse);

// A device (labkit::parse_device's name) this machine has: cuda is refused
// when parsed, with the reason (no GPU here, or a build without CUDA), before
// any rank starts.
CLI::Validator device();

// A device whose speed is measured (--roofline, --mfu, bench step): cpu or
// cuda. The fenced device is refused by name: it is slow on purpose, a test's.
CLI::Validator timed_device();

// A byte count in labkit::parse_bytes's form (1024, 64K, 1M, 2G), at least `min` bytes.
CLI::Validator byte_size(std::uint64_t min = 0);

// A file the lab writes (--json, --trace, --plot), refused when parsed, before
// any work, where it cannot be written: a folder, a path through a file, a place
// this user may not write. Its folders are created, as the lab would. With
// `extensions`, only those (gnuplot draws .svg or .png, chosen by extension).
CLI::Validator output_file(std::vector<std::string> extensions = {});

// CLI11's errors on one line, "error: ..." as a lab's own errors read; CLI11
// adds "Run with --help for more information." on a second.
void one_line_errors(CLI::App& app);

}  // namespace labkit::cli

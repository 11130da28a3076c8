// labkit::cli, the checks only labs put on their options, beside the ones every
// program puts on its own (labkit/cli.h, with the launcher, whose --ranks,
// --topology and --trace use them): a figure to draw, and an option whose text
// a parser turns into its value (a sweep, a spec).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "labkit/cli.h"
#include "labkit/lab/sweep.h"

namespace labkit::cli {

// An option whose text `parse` turns into `value` (a spec, a sweep, a duration),
// refused when parsed, with parse's message, where parse throws.
template <class T, class Parse>
CLI::Option* add_parsed(CLI::App& app, const std::string& name, T& value, Parse parse, const std::string& help) {
  return app
      .add_option_function<std::string>(name, [&value, parse](const std::string& text) { value = parse(text); }, help)
      ->check(parsed_by([parse](const std::string& text) { parse(text); }));
}

// A figure (--plot): an output_file that is .svg or .png.
inline CLI::Validator figure_file() { return output_file({".svg", ".png"}); }

}  // namespace labkit::cli

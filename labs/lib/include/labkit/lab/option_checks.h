// labkit::cli, the checks only labs put on their options, beside the ones every
// program puts on its own (labkit/cli.h, with the launcher, whose --ranks,
// --topology and --trace use them): a figure to draw, and an option whose text
// a parser turns into its value (a sweep, a spec).
#pragma once

#include <functional>
#include <string>
#include <vector>

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

// The options `add` adds to `app`, so that a lab can tie them to the run that
// reads them: each ->needs(run) ("--mfu requires --what-if"), or a run that
// reads none of them ->excludes(each). No option is silently ignored.
//
//   for (CLI::Option* option : cli::added_by(app, [&] { add_what_if_options(app, o); })) option->needs(what_if);
std::vector<CLI::Option*> added_by(CLI::App& app, const std::function<void()>& add);

// Where which run a lab makes depends on an option's value (--sweep ranks=...
// or bucket-mb=...), the same in the lab's body: each of `options` given on
// the command line is an error that says `run` (what was asked for, "--what-if
// llama2-7b") does not read it.
//
//   error: --lr 0.5: --what-if llama2-7b does not read it
void refuse_unread(const CLI::App& app, const std::string& run, const std::vector<std::string>& options);

}  // namespace labkit::cli

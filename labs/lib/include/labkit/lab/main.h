// labkit::lab::run_main — how every lab's main() ends: parse, run, turn an
// exception into one line and exit status 1, and say whose code ran.
//
//   int main(int argc, char** argv) {
//     CLI::App app{"Lab: ..."};
//     ... options ...
//     return lab::run_main(app, argc, argv, [&] { ...; return 0; });
//   }
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "labkit/lab/this_lab.h"

namespace labkit::lab {

// Parses the command line (CLI11's errors on one line, cli::one_line_errors),
// then returns what `body` returns. An exception from it prints "error: WHAT"
// on standard error after what the lab has printed so far, and returns 1. A lab
// with exercises ends with the line that says whose code ran (after an error
// too where it is the learner's, whose mistake it may be; a refusal by the
// reference stays one line).
int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

}  // namespace labkit::lab

// labkit::lab::timed — one run of a lab's --bench: announced, then timed by
// the wall clock. A lab's benchmark times its runs one after another in one
// process (the same machine, the same load), and prints them as a lab::Table
// with the ratio it promises beside its target, as nccl-tests prints its rows.
//
//   const double one = lab::timed("timing the same on one rank", [&] { train_one_rank(o, corpus, config); });
//   lab::Table table = lab::bench_table(44);
//   table.print_header();                               // run           wall
//   table.add({"8 simulated ranks", lab::seconds(many)}, fmt::format("{:.2f}x the one-rank run", many / one));
//
// Its JSON is each added row's wall time ("seconds"), with the columns a lab
// adds to it (JSON-only ones: a schedule's name, a ratio), and each promise
// as target(): {"measured": 1.31, "at_most": 1.5, "met": true}.
#pragma once

#include <functional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "labkit/lab/table.h"
#include "labkit/run.h"

namespace labkit::lab {

// A lab's --bench times the simulator's own cost (its simulated ranks against
// one rank): on a real backend, with no simulator to time, an error that says
// what times the real one; on the fenced device, slow on purpose, an error too.
void refuse_what_the_bench_cannot_time(const RunOptions& run_options, std::string_view device);

// Prints "WHAT ...", then runs `body`; returns its wall time in seconds.
double timed(std::string_view what, const std::function<void()>& body);

// The table of a --bench: each run, named in `width` columns, and its wall time;
// a row's note gives the ratio it promises beside its target. `json_only`
// columns follow them, a cell each in every row.
Table bench_table(int width, std::vector<Column> json_only = {});

// A promise the bench prints as "(target <= 1.5x)", for --json: the figure, its bound, whether it held.
nlohmann::json target(double measured, double at_most);

}  // namespace labkit::lab

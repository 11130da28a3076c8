// Lab 7, --bench: what the simulation itself costs. Side by side in one run:
// --steps steps of the tiny GPT on one rank (no simulator) against the same
// steps on --ranks simulated tensor-parallel ranks, each computing its slice
// of every layer, the same batches.
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/lab/bench.h"
#include "labkit/lab/output.h"
#include "labkit/parallel/equivalence.h"
#include "tp.h"

namespace tp_lab {

int bench(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  lab::refuse_what_the_bench_cannot_time(run_options, o.device);
  const double dense = lab::timed("timing the dense model on one rank",
                                  [&] { train_one_rank_sgd(config, data, o.seed, o.steps, o.batch, o.lr, parse_device(o.device)); });
  const double split = lab::timed("timing the same steps on the simulated tensor-parallel ranks",
                             [&] { train(o, run_options, data, config, false); });
  // Its JSON is one object of both runs, not the table's rows.
  lab::Table table = lab::bench_table(48);
  table.print_header();
  table.add({fmt::format("dense, one rank, {} steps", o.steps), lab::seconds(dense)});
  table.add({fmt::format("tensor parallel{}, {} ranks, {} steps", o.sp ? " + sp" : "", run_options.ranks, o.steps),
             lab::seconds(split)},
            fmt::format("{:.2f}x the dense steps' (target <= 1.5x)", split / dense));
  lab::write_json(o.json, {{"ranks", run_options.ranks}, {"steps", o.steps}, {"sequence_parallel", o.sp},
                           {"dense_seconds", dense}, {"tensor_parallel_seconds", split}, {"ratio", split / dense},
                           {"targets", {{"ratio", lab::target(split / dense, 1.5)}}}});
  return 0;
}

}  // namespace tp_lab

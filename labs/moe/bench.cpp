// --bench: what the simulation costs. The MoE GPT's --steps on --ep simulated
// ranks against the dense tiny GPT's on one rank, the same batches, in wall
// time: the experts compute k MLPs a token where the dense model computes
// one, and the simulator adds its ranks, routing and all-to-alls (the target:
// at most 2x). The MoE run goes first, so that a check that stops a lab where
// its ranks would start (the option fuzzer's) stops this one before any work.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/lab/bench.h"
#include "labkit/lab/output.h"
#include "labkit/parallel/equivalence.h"
#include "moe.h"

namespace moe_lab {

int bench(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  lab::refuse_what_the_bench_cannot_time(run_options, o.device);
  MoeRun r;
  const double moe = lab::timed(fmt::format("timing {} steps of {} sequences: the MoE GPT ({} experts, top-{}) on {} "
                                            "simulated ranks", o.steps, o.batch, o.moe.experts, o.moe.top_k, o.ep),
                                [&] { r = train(o, run_options, data, config, false); });
  if (r.steps.empty()) return 0;  // a process of mpirun that ran another rank than 0
  const double dense = lab::timed("timing the same on the dense tiny GPT on one rank",
                                  [&] { train_one_rank_sgd(config, data, o.seed, o.steps, o.batch, o.lr, parse_device(o.device)); });
  lab::Table table({{.header = "run", .key = "run", .width = 34, .align = lab::Align::left},
                    {.header = "wall", .key = "wall", .width = 10},
                    {.header = "a step", .key = "step", .width = 10},
                    {.header = "vs dense", .key = "vs_dense", .width = 9}});
  table.print_header();
  table.add({"dense tiny GPT, one rank", lab::seconds(dense), lab::seconds(dense / o.steps),
             lab::number(1.0, "{:.2f}x")});
  table.add({fmt::format("MoE GPT, ep {} on the simulator", o.ep), lab::seconds(moe), lab::seconds(moe / o.steps),
             lab::number(moe / dense, "{:.2f}x")});
  fmt::print("(wall time on this machine; the target is 2x)\n");
  lab::write_json(o.json, {{"steps", o.steps}, {"ep", o.ep}, {"dense_seconds", dense}, {"moe_seconds", moe},
                           {"ratio", moe / dense}, {"targets", {{"ratio", lab::target(moe / dense, 2)}}}});
  return 0;
}

}  // namespace moe_lab

// --what-if MODEL: the schedule at a real model's scale, payload-free. The
// same actions run on the simulator (parallel/pipeline_executor.h's
// play_payload_free): each chunk's layers take their FLOPs' time on the
// topology's GPU, each message carries b x s x h bf16 values and nothing
// else. The bubble, measured from the stages' timelines, beside its formula;
// what crosses between the stages beside the reading's formula.
//
// --reading: the reading's example (section 10.6: P = 8, M = 32, a batch of
// 512 sequences of 2048 tokens, h = 8192), its efficiency and P2P bytes by
// its formula, then executed with a model of that width (llama2-70b).
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/output.h"
#include "labkit/topology.h"
#include "labkit/parallel/pipeline_executor.h"
#include "labkit/units.h"
#include "pipeline.h"

namespace pipeline_lab {

namespace {

// The reading's count (section 10.6): each micro-batch sends its b x s x h
// activation forward and its gradient back across each of the P - 1
// boundaries. A chunked schedule crosses a boundary at every change of stage
// along its chunks: interleaved's PV - 1, ZB-V's 2(P - 1) (its turn stays on one stage).
double p2p_bytes(const Schedule& s, double message_bytes) {
  int crossings = 0;
  for (int c = 0; c + 1 < s.chunks(); ++c)
    crossings += s.stage_of_chunk[std::size_t(c)] != s.stage_of_chunk[std::size_t(c + 1)];
  return 2.0 * crossings * s.microbatches * message_bytes;
}

struct Played {
  double bubble = 0, span = 0, sent = 0;
  double busiest = 0;  // the most any stage computed
  std::vector<std::vector<ScheduleRun::Slot>> slots;  // by stage
};

Played play(const Schedule& schedule, RunOptions run_options, const PipeTimes& flops, std::size_t message_bytes) {
  run_options.payload_free = true;
  run_options.ranks = schedule.stages;
  Played out;
  run(run_options, [&](Comm& comm) {
    const PipelineStep step = play_payload_free(comm, schedule, flops, message_bytes);
    double busy = 0;
    for (const ScheduleRun::Slot& slot : step.slots) busy += slot.end - slot.start;
    std::vector<double> report = {step.start, step.end, busy, double(step.sent_bytes)};
    for (const ScheduleRun::Slot& slot : step.slots)
      report.insert(report.end(), {double(slot.op), double(slot.microbatch), double(slot.chunk), slot.start, slot.end});
    const auto all = comm.inspect(view_of(report));
    if (comm.rank() != 0) return;
    double start = all[0][0], end = all[0][1], total_busy = 0;
    for (const auto& r : all) {
      start = std::min(start, r[0]), end = std::max(end, r[1]), total_busy += r[2], out.sent += r[3];
      out.busiest = std::max(out.busiest, r[2]);
      auto& slots = out.slots.emplace_back();
      for (std::size_t i = 4; i + 5 <= r.size(); i += 5)
        slots.push_back({PipeOp(int(r[i])), int(r[i + 1]), int(r[i + 2]), r[i + 3] - start, r[i + 4] - start});
    }
    out.span = end - start;
    out.bubble = 1 - total_busy / (double(all.size()) * out.span);
  });
  return out;
}

}  // namespace

int what_if(const Options& o, const RunOptions& run_options, const Schedule& given) {
  const memory::Architecture arch = memory::model_preset(o.what_if);
  const double seq = o.seq ? o.seq : arch.positions, b = double(o.batch_or_default()) / given.microbatches;
  const int layers_per_chunk = arch.layers / given.chunks();
  const memory::LayerFlops layer = memory::layer_flops(arch, b * seq, seq);
  const PipeTimes flops{layers_per_chunk * layer.forward, layers_per_chunk * layer.backward_input,
                        layers_per_chunk * layer.backward_weight, 0};
  const std::size_t message = std::size_t(b * seq * arch.hidden * 2);
  const Topology topology = find_topology(run_options.topology);
  const double per_second = topology.device.peak_flops * run_options.efficiency;
  const PipeTimes seconds{flops.forward / per_second, flops.backward_input / per_second,
                          flops.backward_weight / per_second, 0};
  // Made again for these times: ZB-V places its weight gradients by them.
  const Schedule schedule =
      make_schedule(given.name, given.stages, given.microbatches, given.virtual_stages, seconds);
  fmt::print("pipeline --what-if {}: {} layers of h = {}, {} per chunk, micro-batches of b = {:g} x s = {:g}, bf16, "
             "compute at {:.0f}% of the GPU's peak on {}, payload-free ...\n", o.what_if, arch.layers, arch.hidden,
             layers_per_chunk, b, seq, 100 * run_options.efficiency, run_options.topology);
  std::fflush(stdout);
  const Played r = play(schedule, run_options, flops, message);
  const ScheduleRun played = validate(schedule, seconds);
  const double formula = bubble_formula(schedule, seconds), reading = p2p_bytes(schedule, double(message));
  fmt::print("{:<12} {:>3} {:>4} {:>3} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8} {:>7} {:>11} {:>11}\n", "schedule", "P",
             "M", "V", "forward", "backward", "weights", "step", "bubble", "formula", "played", "P2P/step", "formula");
  const bool split = schedule.name == "zb-h1" || schedule.name == "zbv";
  fmt::print("{:<12} {:>3} {:>4} {:>3} {:>9} {:>9} {:>9} {:>9} {:>6.1f}% {:>7.1f}% {:>6.1f}% {:>11} {:>11}\n",
             schedule.name, schedule.stages, schedule.microbatches, schedule.virtual_stages,
             format_seconds(seconds.forward),
             format_seconds(split ? seconds.backward_input : seconds.backward_input + seconds.backward_weight),
             split ? format_seconds(seconds.backward_weight) : "-", format_seconds(r.span), 100 * r.bubble,
             100 * formula, 100 * played.bubble, format_bytes(std::uint64_t(r.sent)),
             format_bytes(std::uint64_t(reading)));
  fmt::print("(a chunk's times from its FLOPs, 2 per weight a token meets and 4 s h for attention, backward twice "
             "forward{}; the last stage's head is left out; P2P/step: what the stages sent, measured; formula: the "
             "reading's 2 b s h x 2 bytes per micro-batch and boundary, over the {} boundaries the chunks cross)\n",
             split ? ", the weights' part 2 per weight" : "", reading / (2.0 * schedule.microbatches * double(message)));
  if (!run_options.stragglers.empty()) {
    RunOptions even = run_options;
    even.stragglers.clear();
    const Played without = play(schedule, even, flops, message);
    fmt::print("with --straggler: the step takes {}, {:.2f}x the even pipeline's {}; the slowest stage computes for {} "
               "of it and every other stage waits on it: a pipeline runs at its slowest stage's pace\n",
               format_seconds(r.span), r.span / without.span, format_seconds(without.span),
               format_seconds(r.busiest));
  }
  if (!o.plot.empty()) {
    plot_grid({{fmt::format("{} on {}: {} (bubble {:.1f}%), payload-free", schedule.name, o.what_if,
                            format_seconds(r.span), 100 * r.bubble),
                r.slots, schedule.microbatches}},
              "s", o.plot);
    fmt::print("wrote {}\n", o.plot);
  }
  if (!o.json.empty())
    create_file(o.json) << nlohmann::json{{"model", o.what_if}, {"schedule", schedule.name},
                                          {"stages", schedule.stages}, {"microbatches", schedule.microbatches},
                                          {"virtual_stages", schedule.virtual_stages}, {"forward", seconds.forward},
                                          {"backward_input", seconds.backward_input},
                                          {"backward_weight", seconds.backward_weight}, {"step", r.span},
                                          {"bubble", r.bubble}, {"formula", formula}, {"played", played.bubble},
                                          {"p2p_bytes", r.sent}, {"p2p_formula", reading}}
                               .dump(2)
                        << '\n';
  return 0;
}

int readings_example(const RunOptions& run_options) {
  const int P = 8, M = 32;
  const double batch = 512, seq = 2048, h = 8192, b = batch / M;
  const double bubble = (P - 1.0) / (M + P - 1), message = b * seq * h * 2;
  const double total = 2 * message * (P - 1) * M;
  fmt::print("the reading's example (section 10.6): P = {}, M = {}, batch {:g} x s = {:g}, h = {:g}, bf16: bubble "
             "(P-1)/(M+P-1) = {:.1f}%, efficiency {:.1f}% (it prints ~82%); P2P per step 2 x b s h x 2 bytes x (P-1) "
             "x M = {:.1f} GB ({}), {} per message\n", P, M, batch, seq, h, 100 * bubble, 100 * (1 - bubble),
             total / 1e9, format_bytes(std::uint64_t(total)), format_bytes(std::uint64_t(message)));
  Options o;
  o.what_if = "llama2-70b";  // h = 8192, 80 layers: 10 a stage
  o.stages = P, o.microbatches = M, o.batch = int(batch), o.seq = int(seq);
  return what_if(o, run_options, one_f_one_b_schedule(P, M));
}

}  // namespace pipeline_lab

// What the command line asks that cannot be, refused before any rank starts,
// each error naming the option to change. The schedule's own rules (a
// schedule file's deadlock, interleaved's M a multiple of P) are the schedule
// library's (parallel/pipeline_schedule.h: validate, make_schedule); here
// they are only given the options that chose the schedule.
#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/lab/training_options.h"
#include "labkit/memory.h"
#include "pipeline.h"

namespace pipeline_lab {

namespace {

// The model's layers against the stages and chunks, the batch against the
// micro-batches, the ranks against the stages.
void check_shape(const Options& o, const RunOptions& run_options, const GptConfig& config) {
  const int P = o.stages, M = o.microbatches, V = o.virtual_or_default();
  const bool tiny = o.what_if.empty();
  const int L = tiny ? config.layers : memory::model_preset(o.what_if).layers;
  const std::string model = tiny ? "--layers" : "--what-if " + o.what_if;
  if (P > L) throw Error(fmt::format("--stages {}: more stages than the model's {} layers ({})", P, L, model));
  if (L % P != 0)
    throw Error(fmt::format("--stages {}: the model's {} layers do not cut into {} equal stages ({})", P, L, P, model));
  if (!tiny) memory::what_if_seq(memory::model_preset(o.what_if), o.seq);
  if (tiny && o.seq) throw Error("--seq goes with --what-if; the tiny GPT trains on its context of " +
                                 std::to_string(config.max_seq));
  if (tiny) lab::refuse_payload_free(run_options.payload_free, {"--what-if"});
  if (!tiny) lab::refuse_model_device_backend(o, run_options, "--what-if runs payload-free");
  if ((L / P) % V != 0)
    throw Error(o.virtual_stages
                    ? fmt::format("--virtual {}: a stage's {} layers do not cut into {} equal chunks", V, L / P, V)
                    : fmt::format("--schedule {}: a stage's {} layers do not cut into the {} equal chunks it runs "
                                  "by default (--virtual)", o.schedule, L / P, V));
  if (const int B = o.batch_or_default(); B % M != 0)
    throw Error(fmt::format("--batch {}: it does not cut into {} equal micro-batches (--microbatches)", B, M));
  lab::check_ranks_of_shape(run_options, P, "--stages", "stage");
}

}  // namespace

Schedule checked_schedule(const Options& o, const RunOptions& run_options, const GptConfig& config,
                          const std::optional<Schedule>& by_hand) {
  check_shape(o, run_options, config);
  if (by_hand) {
    try {
      validate(*by_hand);
    } catch (const Error& e) {
      throw Error(fmt::format("--schedule-file {}: {}", o.schedule_file, e.what()));
    }
    return *by_hand;
  }
  try {
    return make_schedule(o.schedule, o.stages, o.microbatches, o.virtual_or_default());
  } catch (const Error& e) {
    throw Error(fmt::format("--schedule {} --stages {} --microbatches {}{}: {}", o.schedule, o.stages, o.microbatches,
                            o.virtual_stages ? fmt::format(" --virtual {}", o.virtual_stages) : "", e.what()));
  }
}

}  // namespace pipeline_lab

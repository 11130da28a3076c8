#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddp.h"
#include "labkit/error.h"
#include "labkit/optim.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/sampler.h"
#include "labkit/parallel/training_loop.h"

namespace ddp_lab {

BucketCaps caps_of(const Options& o) {
  return {.first_bytes = std::size_t(o.first_bucket_mb * (1 << 20)), .bytes = std::size_t(o.bucket_mb * (1 << 20))};
}

std::string run_shape(const Options& o, int ranks) {
  return fmt::format("{} rank{}, global batch {}{}, {} step{}", ranks, ranks == 1 ? "" : "s", o.batch,
                     o.accum > 1 ? fmt::format(" x {} micro-steps", o.accum) : "", o.steps, o.steps == 1 ? "" : "s");
}

namespace {

// The optimizer every rank applies to the same averaged gradients, with the
// large-batch recipe around it: a linear warmup of the learning rate (Goyal et
// al. 2017) and clipping by the global norm. LARS and LAMB take the model's layers
// (Gpt::backward_order's pieces) as theirs.
struct Optimizer {
  std::string name;
  float lr;
  int warmup;
  double clip;
  AdamW adamw;
  SgdMomentum sgd;
  Lars lars;
  Lamb lamb;
  int steps = 0;
  explicit Optimizer(const Options& o)
      : name(o.optimizer), lr(o.lr), warmup(o.warmup), clip(o.clip), adamw{.lr = o.lr}, sgd{.lr = o.lr},
        lars{.lr = o.lr}, lamb{.lr = o.lr} {}

  void update(Gpt& model) {
    adamw.lr = sgd.lr = lars.lr = lamb.lr = warmup_lr(lr, ++steps, warmup);
    if (clip > 0) clip_by_global_norm(model.gradients(), clip);  // DDP: every rank holds the whole gradient
    if (name == "adamw") return adamw.update(model.parameters(), model.gradients());
    if (name == "sgd") return sgd.update(model.parameters(), model.gradients());
    if (name == "lars") return lars.update(model.parameters(), model.gradients(), model.backward_order());
    lamb.update(model.parameters(), model.gradients(), model.backward_order());
  }
};

// Rank 0's payload per step from its trace: an all_gather's event holds every
// rank's block, of which this rank sent one.
std::uint64_t traced_bytes(const TraceTrack& track, double from, double to, int ranks) {
  std::uint64_t bytes = 0;
  for (const TraceEvent& e : track.events)
    if (e.kind == TraceEvent::Kind::collective && e.start >= from && e.end <= to)
      bytes += e.name == "all_gather" ? e.bytes / ranks : e.bytes;
  return bytes;
}

}  // namespace

// Trains `o.steps` steps data-parallel in `mode` and measures them; given a
// `compression`, each step ends in that compressed average instead.
ModeRun train(const Options& o, RunOptions run_options, DdpMode mode, const Sequences& corpus, const GptConfig& config,
              std::optional<CompressionSpec> compression) {
  ModeRun out;
  out.mode = mode;
  run_options.keep_trace = true;
  const TrainingRun run = run_training(run_options, [&](Comm& comm, RankTraining& training) {
    if (o.batch % comm.size() != 0)
      fail(comm.who(), "ddp",
           "--batch {} does not split over {} ranks: each rank takes batch / ranks sequences", o.batch, comm.size());
    const int T = config.max_seq, b = o.batch / comm.size();
    Gpt model(config, o.seed, parse_device(o.device));  // the same seed: the same weights on every rank
    Optimizer optimizer(o);
    const std::unique_ptr<GradientCompressor> compressor =
        compression ? make_compressor(comm, *compression, model.tensors(), o.seed) : nullptr;
    DataParallel ddp(comm, model, mode, caps_of(o), compressor.get());
    const DistributedSampler sampler(corpus.count, comm.size(), comm.rank(), o.seed);
    std::vector<int> x, y;
    training.steps(o.steps, [&](int s) {
      float loss = 0;
      for (int m = 0; m < o.accum; ++m) {
        fill_batch(corpus, batch_of(sampler, s, b, m, o.accum), x, y);
        loss += ddp.forward_backward(x, y, b, T, m, o.accum) / o.accum;
      }
      if (s == 0 && comm.rank() == 0) out.first_grads = model.gradients().to_host();
      const double started = comm.now();
      optimizer.update(model);
      // It reads and writes each parameter's weight, gradient and state: about a dozen FLOPs apiece.
      comm.record_compute("optimizer", started, 12.0 * double(model.parameter_count()));
      return loss;
    });
    const std::vector<float> weights = model.parameters().to_host();
    training.replicated(weights);
    if (comm.rank() != 0) return;
    out.buckets = std::max<int>(1, int(ddp.buckets().size()));
    out.weights = weights;
    if (compressor) out.bytes_sent = compressor->bytes_sent(), out.bytes_formula = compressor->formula_bytes();
  });
  if (!run.on_rank_zero()) return out;
  out.ranks = run.ranks;
  out.losses = run.mean_losses();
  out.fingerprint = run.fingerprint;
  out.ranks_agree = run.ranks_agree;
  out.per_step = step_times(run.trace->tracks()[0], run.start, run.end);
  for (double* t : {&out.per_step.forward, &out.per_step.backward, &out.per_step.optimizer, &out.per_step.comm,
                    &out.per_step.step})
    *t /= o.steps;
  out.bytes_traced = traced_bytes(run.trace->tracks()[0], run.start, run.end, out.ranks) / o.steps;
  return out;
}

OneRankRun train_one_rank(const Options& o, const Sequences& corpus, const GptConfig& config, bool reversed,
                          int micro_steps) {
  Gpt model(config, o.seed, parse_device(o.device));
  Optimizer optimizer(o);
  return labkit::train_one_rank(model, corpus, o.seed, o.steps, o.batch * o.accum,
                                [&](Gpt& m) { optimizer.update(m); }, reversed, micro_steps);
}

}  // namespace ddp_lab

// The tiny GPT trained on the kit's character corpus, on one rank. The model and
// its ops are core/src/gpt.cpp and core/src/ops.cpp (llm.c's layout). Each step
// charges the simulator its FLOPs, so the virtual clock shows what the step
// would take on the topology's device.
//
// --checkpoint-every N saves the run every N steps (and after the last) to
// --checkpoint; --resume goes on from there and ends bit for bit where a run
// that was never stopped ends: batch s is the same in both.
#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/lab/output.h"
#include "labkit/optim.h"
#include "labkit/output.h"
#include "labkit/units.h"
#include "train_lab.h"

namespace train_lab {

using namespace labkit;

namespace {

using Clock = std::chrono::steady_clock;

// The corpus's token ids, 90% to train on and the rest to validate; batch s is
// `batch` windows of T + 1 tokens spread over one of the two parts.
class Batches {
 public:
  Batches(const std::vector<int>& ids, int batch, int T)
      : x(std::size_t(batch) * T), y(std::size_t(batch) * T), ids_(ids), batch_(batch), T_(T) {}

  // Loads batch s of the validation text, or of the training text, into x and y (targets: x shifted by one).
  void load(int s, bool validation) {
    const std::size_t split = ids_.size() * 9 / 10;
    const std::size_t lo = validation ? split : 0, hi = validation ? ids_.size() : split;
    for (int b = 0; b < batch_; ++b) {
      const std::size_t window = (std::size_t(s) * batch_ + b) * 7919;
      const std::size_t at = lo + window % (hi - lo - T_ - 1);
      for (int t = 0; t < T_; ++t) {
        x[b * T_ + t] = ids_[at + t];
        y[b * T_ + t] = ids_[at + t + 1];
      }
    }
  }

  std::vector<int> x, y;

 private:
  const std::vector<int>& ids_;
  int batch_, T_;
};

std::int64_t weight_bytes(const Gpt& model) { return std::int64_t(model.parameter_count() * sizeof(float)); }

// The step to start at: 0, or (--resume) the checkpoint's, refused where it
// leaves no step to train.
int first_step(const Options& o, Gpt& model, AdamW& adamw, const DataOrder& order) {
  if (!o.resume) return 0;
  load_checkpoint(o.checkpoint, model, adamw, order);
  if (adamw.step >= o.steps)
    throw Error(fmt::format("--resume: '{}' is at step {}, which leaves nothing of --steps {} to train (more --steps "
                            "go on from it)", o.checkpoint, adamw.step, o.steps));
  return adamw.step;
}

// Steps `first` to --steps: forward, backward and AdamW's update, charged to the
// simulator; the loss and validation loss printed (and kept in `curve`) every
// --print-every steps and at the last, and the run saved every --checkpoint-every.
void train_steps(Comm& comm, const Options& o, Gpt& model, AdamW& adamw, const DataOrder& order, int first,
                 Batches& batches, nlohmann::json& curve) {
  const int T = model.config().max_seq;
  for (int s = first; s <= o.steps; ++s) {
    const bool report = s % o.print_every == 0 || s == o.steps;
    float val = 0;
    if (report) {  // validate first: backward needs the training batch's activations
      batches.load(s, true);
      val = model.forward(batches.x, batches.y, o.batch, T);
    }
    batches.load(s, false);
    model.queue_forward(batches.x, batches.y, o.batch, T);  // read only when reported: reading waits for the device
    if (report) {
      const float loss = model.loss();
      progress_line("");  // the step's line takes its place
      fmt::print("step {:>5}/{}  loss {:.4f}  val {:.4f}\n", s, o.steps, loss, val);
      curve.push_back({{"step", s}, {"loss", loss}, {"val_loss", val}});
    }
    if (s == o.steps) break;
    progress_line(fmt::format("  step {} of {}", s + 1, o.steps));  // between the --print-every lines
    model.zero_grad();
    model.backward();
    adamw.update(model.parameters(), model.gradients());
    if (s == first) {  // held from the first step on: the activations, and AdamW's m and v
      comm.track_memory(MemoryUse::activations, std::int64_t(model.activation_bytes()));
      comm.track_memory(MemoryUse::optimizer, 2 * weight_bytes(model));
    }
    comm.compute_flops("step", model.flops_per_step(o.batch, T));
    if (o.checkpoint_every && ((s + 1) % o.checkpoint_every == 0 || s + 1 == o.steps))
      save_checkpoint(o.checkpoint, model, adamw, order);
  }
}

// Tokens per second here and (on the simulator) the time on the simulated
// device, the memory by use, and the MFU; their figures for --json.
nlohmann::json print_summary(Comm& comm, const Options& o, const RunOptions& run, const Gpt& model, int ran,
                             double wall) {
  const int tokens = o.batch * model.config().max_seq;
  fmt::print("{} steps of {} tokens: {:.0f} tokens/s on this {}{}\n", ran, tokens, ran * tokens / wall,
             o.device == "cuda" ? "GPU" : o.device == "fenced" ? "CPU, fenced" : "CPU",
             run.backend == "sim" ? fmt::format("; {} on the simulated {}", format_seconds(comm.now()), run.topology)
                                  : "");
  std::string held;
  nlohmann::json memory;
  for (MemoryUse use : kMemoryUses) {
    held += fmt::format("{} {}, ", name_of(use), format_bytes(comm.memory().peak[std::size_t(use)]));
    memory[std::string(name_of(use))] = comm.memory().peak[std::size_t(use)];
  }
  memory["peak"] = comm.memory().peak_total;
  fmt::print("memory per rank: {}peak {}\n", held, format_bytes(comm.memory().peak_total));
  nlohmann::json summary = print_mfu(ran * model.flops_per_step(o.batch, model.config().max_seq), wall, comm.now(),
                                     run, model.device(), o.mfu);
  summary["steps_run"] = ran;
  summary["tokens_per_step"] = tokens;
  summary["wall_tokens_per_second"] = ran * tokens / wall;
  if (run.backend == "sim") summary["simulated_seconds"] = comm.now();
  summary["memory"] = memory;
  return summary;
}

void train_rank(Comm& comm, const Options& o, const RunOptions& run, const Tokens& corpus, const GptConfig& config,
                nlohmann::json& report) {
  const Clock::time_point start = Clock::now();  // once the backend has started (mpirun's MPI_Init takes 0.3 s)
  Gpt model(config, o.seed, parse_device(o.device));
  AdamW adamw{.lr = o.lr};
  const DataOrder order{.seed = o.seed, .batch = o.batch};
  const int first = first_step(o, model, adamw, order);
  comm.track_memory(MemoryUse::weights, weight_bytes(model));
  comm.track_memory(MemoryUse::gradients, weight_bytes(model));
  fmt::print("{}: {} parameters, {} layers, {} channels, context {}, vocabulary {}\n", o.model,
             model.parameter_count(), config.layers, config.channels, config.max_seq, config.vocab);
  if (o.resume) fmt::print("resumed from {} at step {}\n", o.checkpoint, first);
  Batches batches(corpus.ids, o.batch, config.max_seq);
  nlohmann::json curve = nlohmann::json::array();
  train_steps(comm, o, model, adamw, order, first, batches, curve);
  report = print_summary(comm, o, run, model, o.steps - first,
                         std::chrono::duration<double>(Clock::now() - start).count());
  report["model"] = o.model;
  report["parameters"] = model.parameter_count();
  report["curve"] = curve;
}

}  // namespace

int train(const Options& o, const RunOptions& run_options) {
  if (run_options.ranks != 1)  // checked before MPI starts, once
    throw Error(fmt::format("{} {}: the lab trains one model on one rank; more would each train their own, "
                            "unshared (the ddp lab trains one over several ranks)", ranks_flag(run_options),
                            run_options.ranks));
  const Tokens corpus = character_tokens(synthetic_corpus(200000, o.seed));
  const GptConfig config = gpt_preset(o.model, corpus.vocab);
  check_batch_fits(config, o.batch, config.max_seq);
  nlohmann::json report;
  run(run_options, [&](Comm& comm) { train_rank(comm, o, run_options, corpus, config, report); });
  lab::write_json(o.json, report);
  return 0;
}

}  // namespace train_lab

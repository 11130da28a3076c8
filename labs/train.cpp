// Train a tiny GPT on the kit's character corpus, on one rank.
//
//   ./labkit lab train --model tiny-gpt --steps 200
//
//   step    0/200  loss 3.33
//   step   20/200  loss 2.41
//   ...
//
// The model and its ops are core/src/gpt.cpp and core/src/ops.cpp (llm.c's
// layout). Each step charges the simulator its FLOPs, so the virtual clock
// shows what the step would take on the topology's device. The data-parallel,
// FSDP, tensor- and pipeline-parallel labs check their runs against this one.
//
// It ends with the run's model FLOPs utilization (MFU: Chowdhery et al. 2022,
// "PaLM", appendix B): model FLOPs per second over the peak, on the simulated
// device and, with --mfu, on this one (its peak measured as in chapter 10).
//
// --checkpoint-every N saves the run every N steps (and after the last) to
// --checkpoint; --resume goes on from there and ends bit for bit where a run
// that was never stopped ends (--fail-rank 0 --at T stops one on purpose).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/op_bench.h"
#include "labkit/optim.h"
#include "labkit/output.h"
#include "labkit/run.h"
#include "labkit/topology.h"
#include "labkit/units.h"

using namespace labkit;

namespace {
// MFU = model FLOPs / seconds / peak FLOP/s. On the simulator a step's FLOPs are
// charged at --efficiency of the device's peak, so its MFU is that efficiency:
// the simulator assumes what a real run measures.
void print_mfu(double model_flops, double wall, double simulated, const RunOptions& o, const Device& here,
               bool measure_here) {
  const DeviceModel sim = find_topology(o.topology).device;
  fmt::print("model FLOPs {:.3g} (matmuls and attention, forward and backward: Gpt::flops_per_step); {:.2f} GFLOP/s "
             "here\n", model_flops, model_flops / wall / 1e9);
  fmt::print("MFU on the simulated {}: {:.1f}% of {:.0f} TFLOP/s (it charges FLOPs at --efficiency {:g})\n",
             sim.name, 100 * model_flops / simulated / sim.peak_flops, sim.peak_flops / 1e12, o.efficiency);
  if (!measure_here) return;
  const double peak = measure_peak_flops(here, here.kind == DeviceKind::cpu ? 1024 : 8192);
  fmt::print("MFU on this {}: {:.1f}% of {:.1f} GFLOP/s, its peak as the kit's matmul reaches it (one core on a CPU)\n",
             here.kind == DeviceKind::cpu ? "CPU" : "GPU", 100 * model_flops / wall / peak, peak / 1e9);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a tiny GPT on one rank"};
  cli::one_line_errors(app);
  std::string model_name = "tiny-gpt", json, device_name = "cpu", checkpoint = "train.ckpt";
  int steps = 200, batch = 8, every = 20, checkpoint_every = 0;
  bool resume = false, mfu = false;
  float lr = 3e-3f;
  std::uint64_t seed = 1337;
  RunOptions run_options;
  run_options.ranks = 1;
  app.add_option("--model", model_name, "tiny-gpt")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& name) { gpt_preset(name, 1); }));
  app.add_option("--steps", steps, "optimizer steps")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--batch", batch, "sequences per step")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--lr", lr, "AdamW learning rate")->capture_default_str()->check(cli::above(0.0f));
  app.add_option("--seed", seed, "initialisation and corpus")
      ->capture_default_str()->check(cli::at_least(std::uint64_t(0)));
  app.add_option("--print-every", every, "steps between loss lines")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--device", device_name, "where the model trains: cpu, or cuda (a GPU)")
      ->capture_default_str()->check(cli::parsed_by(parse_device));
  app.add_option("--json", json, "also write the loss curve as JSON")->check(cli::output_file());
  app.add_option("--checkpoint", checkpoint, "the file --checkpoint-every writes and --resume reads")
      ->capture_default_str();
  app.add_option("--checkpoint-every", checkpoint_every, "save the run every N steps and after the last")
      ->check(cli::at_least(1));
  app.add_flag("--resume", resume, "go on from --checkpoint instead of from step 0");
  app.add_flag("--mfu", mfu, "also measure this device's peak FLOP/s and print the MFU here");
  add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);

  // The corpus, as characters; 90% to train on, the rest to validate.
  const Tokens corpus = character_tokens(synthetic_corpus(200000, seed));
  const std::vector<int>& ids = corpus.ids;
  const std::size_t split = ids.size() * 9 / 10;

  try {
    if (app.count("--checkpoint") && !checkpoint_every && !resume)
      throw Error(fmt::format("--checkpoint {}: nothing writes or reads it without --checkpoint-every or --resume",
                              checkpoint));
    const GptConfig config = gpt_preset(model_name, corpus.vocab);
    const DeviceKind where = parse_device(device_name);
    const int T = config.max_seq;
    check_batch_fits(config, batch, T);
    nlohmann::json curve = nlohmann::json::array();
    const auto start = std::chrono::steady_clock::now();
    run(run_options, [&](Comm& comm) {
      if (comm.size() != 1)  // --ranks, or mpirun's -np
        throw Error(fmt::format("--ranks {}: the lab trains one model on one rank; more would each train their own, "
                                "unshared (the ddp lab trains one over several ranks)", comm.size()));
      Gpt model(config, seed, where);
      AdamW adamw{.lr = lr};
      const DataOrder order{.seed = seed, .batch = batch};
      if (resume) {
        load_checkpoint(checkpoint, model, adamw, order);
        if (adamw.step > steps)
          throw Error(fmt::format("--resume: '{}' is at step {}, past --steps {}", checkpoint, adamw.step, steps));
      }
      const int first = adamw.step;  // batch s is the same in a resumed run as in an unbroken one
      std::vector<int> x(batch * T), y(batch * T);
      // Batch s: windows spread over the training text.
      auto load = [&](int s, std::size_t lo, std::size_t hi) {
        for (int b = 0; b < batch; ++b) {
          const std::size_t window = (std::size_t(s) * batch + b) * 7919;
          const std::size_t at = lo + window % (hi - lo - T - 1);
          for (int t = 0; t < T; ++t) {
            x[b * T + t] = ids[at + t];
            y[b * T + t] = ids[at + t + 1];
          }
        }
      };
      const std::int64_t model_bytes = std::int64_t(model.parameter_count() * sizeof(float));
      comm.track_memory(MemoryUse::weights, model_bytes);
      comm.track_memory(MemoryUse::gradients, model_bytes);
      fmt::print("{}: {} parameters, {} layers, {} channels, context {}, vocabulary {}\n", model_name,
                 model.parameter_count(), config.layers, config.channels, T, config.vocab);
      if (resume) fmt::print("resumed from {} at step {}\n", checkpoint, first);
      for (int s = first; s <= steps; ++s) {
        const bool report = s % every == 0 || s == steps;
        float val = 0;
        if (report) {  // validate first: backward needs the training batch's activations
          load(s, split, ids.size());
          val = model.forward(x, y, batch, T);
        }
        load(s, 0, split);
        const float loss = model.forward(x, y, batch, T);
        if (report) {
          fmt::print("step {:>5}/{}  loss {:.4f}  val {:.4f}\n", s, steps, loss, val);
          curve.push_back({{"step", s}, {"loss", loss}, {"val_loss", val}});
        }
        if (s == steps) break;
        model.zero_grad();
        model.backward();
        adamw.update(model.parameters(), model.gradients());
        if (s == first) {  // held from the first step on: the activations, and AdamW's m and v
          comm.track_memory(MemoryUse::activations, std::int64_t(model.activation_bytes()));
          comm.track_memory(MemoryUse::optimizer, 2 * model_bytes);
        }
        comm.compute("step", model.flops_per_step(batch, T));
        if (checkpoint_every && ((s + 1) % checkpoint_every == 0 || s + 1 == steps))
          save_checkpoint(checkpoint, model, adamw, order);
      }
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const int ran = steps - first;
      fmt::print("{} steps of {} tokens: {:.0f} tokens/s on this {}; {} on the simulated {}\n", ran, batch * T,
                 ran * batch * T / wall, device_name == "cpu" ? "CPU" : "GPU", format_seconds(comm.now()),
                 run_options.topology);
      std::string held;
      for (MemoryUse use : kMemoryUses)
        held += fmt::format("{} {}, ", name_of(use), format_bytes(comm.memory().peak[std::size_t(use)]));
      fmt::print("memory per rank: {}peak {}\n", held, format_bytes(comm.memory().peak_total));
      print_mfu(ran * model.flops_per_step(batch, T), wall, comm.now(), run_options, model.device(), mfu);
    });
    if (!json.empty()) create_file(json) << curve.dump(2) << '\n';
  } catch (const std::exception& e) {
    std::fflush(stdout);  // the steps it printed, then the error
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}

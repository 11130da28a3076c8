// One training step of the tiny GPT (forward, backward, AdamW), timed on a
// device: the figure that bench/train_step_torch.py measures for the same model
// in PyTorch eager. With --dump DIR it writes the initial weights (our flat
// layout) and the batch, so the PyTorch side starts from the same model and
// checks that its first loss is ours.
//
//   ./labkit bench step --device cuda
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/gpt.h"
#include "labkit/optim.h"
#include "labkit/output.h"

using namespace labkit;

namespace {
template <class T> void write_binary(const std::filesystem::path& path, const std::vector<T>& v) {
  create_file(path.string()).write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time one GPT training step (forward, backward, AdamW)"};
  cli::one_line_errors(app);
  std::string model_name = "tiny-gpt", device_name = "cpu", dump, json;
  int batch = 8, steps = 50, warmup = 5, vocab = 32;
  app.add_option("--model", model_name, "tiny-gpt or small-gpt (labkit::gpt_preset)")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& name) { gpt_preset(name, 1); }));
  app.add_option("--device", device_name, "cpu or cuda")->capture_default_str()->check(cli::timed_device());
  app.add_option("--batch", batch, "sequences per step")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--steps", steps, "timed steps (the median is reported)")
      ->capture_default_str()->check(cli::at_least(1));
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str()->check(cli::at_least(0));
  app.add_option("--vocab", vocab, "vocabulary size")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--dump", dump, "write the initial weights, the batch and the config here");
  app.add_option("--json", json, "write the result as JSON")->check(cli::output_file());
  CLI11_PARSE(app, argc, argv);

  try {
    const DeviceKind where = parse_device(device_name);
    const GptConfig config = gpt_preset(model_name, vocab);
    const int T = config.max_seq;
    Gpt model(config, 1337, where);
    std::vector<int> x(batch * T), y(batch * T);
    for (std::size_t i = 0; i < x.size(); ++i) {  // a fixed batch: the loader is not what is timed
      x[i] = int((i * 7 + i / 3) % vocab);
      y[i] = int((i * 7 + i / 3 + 1) % vocab);
    }
    if (!dump.empty()) {
      std::filesystem::create_directories(dump);
      write_binary(std::filesystem::path(dump) / "params.bin", model.parameters().to_host());
      std::vector<int> xy = x;
      xy.insert(xy.end(), y.begin(), y.end());
      write_binary(std::filesystem::path(dump) / "batch.bin", xy);
      create_file((std::filesystem::path(dump) / "config.json").string())
          << nlohmann::json{{"model", model_name}, {"batch", batch}, {"seq", T}, {"vocab", vocab},
                            {"layers", config.layers}, {"heads", config.heads}, {"channels", config.channels}}
                 .dump()
          << '\n';
    }
    AdamW adamw;
    std::vector<double> ms;
    float first_loss = 0;
    for (int s = 0; s < warmup + steps; ++s) {
      progress_line(s < warmup ? fmt::format("  warm-up step {} of {}", s + 1, warmup)
                               : fmt::format("  step {} of {}", s - warmup + 1, steps));
      const auto start = std::chrono::steady_clock::now();
      const float loss = model.forward(x, y, batch, T);
      model.zero_grad();
      model.backward();
      adamw.update(model.parameters(), model.gradients());
      model.device().synchronize();
      const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (s == 0) first_loss = loss;
      if (s >= warmup) ms.push_back(elapsed);
    }
    progress_line("");
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    fmt::print("labkit   {:>4}  {} ({} parameters), B={} T={}: first loss {:.6f}, step {:.3f} ms median of {} "
               "({:.0f} tokens/s)\n",
               device_name, model_name, model.parameter_count(), batch, T, first_loss, median, steps, batch * T / median * 1e3);
    if (!json.empty())
      create_file(json) << nlohmann::json{{"framework", "labkit"}, {"device", device_name}, {"batch", batch},
                                          {"seq", T},             {"first_loss", first_loss}, {"step_ms", median},
                                          {"steps", steps}}
                               .dump(2)
                        << '\n';
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}

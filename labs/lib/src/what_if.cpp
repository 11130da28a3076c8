#include "labkit/lab/what_if.h"

#include "labkit/cli.h"
#include "labkit/memory.h"

namespace labkit::lab {

void add_what_if(CLI::App& app, std::string& model, const std::string& help) {
  app.add_option("--what-if", model, help)
      ->check(cli::parsed_by([](const std::string& name) { memory::model_preset(name); }));
}

void add_step_seconds(CLI::App& app, double& seconds) {
  app.add_option("--step-seconds", seconds, "--what-if: compute per step, in seconds")
      ->capture_default_str()->check(cli::above(0.0, kMostStepSeconds));
}

void add_what_if_seq(CLI::App& app, int& seq, const std::string& help) {
  CLI::Option* option = app.add_option("--seq", seq, help)->check(cli::in_range(1, 1 << 20));
  if (seq != 0) option->capture_default_str();
}

}  // namespace labkit::lab

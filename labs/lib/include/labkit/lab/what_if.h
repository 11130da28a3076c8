// labkit::lab::add_what_if — the option of every training lab's study at
// scale: --what-if MODEL names a model preset (memory::model_preset's:
// llama2-7b, gpt3-175b, mixtral-8x7b, ...) whose shapes the lab runs
// payload-free, at their real size, in place of the tiny GPT; where the lab
// charges a step's compute as a figure rather than from those shapes, it also
// takes --step-seconds.
//
//   lab::add_what_if(app, o.what_if, "a model preset (llama2-7b, ...): one payload-free step of its shapes per mode");
//   lab::add_step_seconds(app, o.step_seconds);
//   lab::add_what_if_seq(app, o.seq, "--what-if: tokens per sequence (one sequence per GPU)");
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace labkit::lab {

// Adds --what-if MODEL, refused unless MODEL is a model preset; `help` says what the lab does with it.
void add_what_if(CLI::App& app, std::string& model, const std::string& help);

// Adds --step-seconds, the compute a --what-if step takes, above 0 (`seconds`' value is its default).
void add_step_seconds(CLI::App& app, double& seconds);
// A step of at most a million seconds: past some 1e9 the simulated clock's
// doubles step coarser than a link's microseconds, and the times it prints go wrong.
inline constexpr double kMostStepSeconds = 1e6;

// Adds --seq, the tokens of a --what-if sequence, 1 to 2^20. `help` names the
// default: `seq`'s value, or where it is 0 the lab's own (the model's context).
void add_what_if_seq(CLI::App& app, int& seq, const std::string& help);

}  // namespace labkit::lab

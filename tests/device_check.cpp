// device_check — every lab that takes --device, run on a device against the
// same command on the CPU: the losses must agree (bit for bit on the fenced
// device, which runs the CPU's kernels; within 1e-4 relative on a GPU, whose
// kernels sum in another order), both runs must exit 0 (each lab checks its
// own ranks against one rank), and the wall times stand side by side.
// ./labkit gpu-check runs it with --device cuda; CTest with --device fenced,
// so that it cannot rot on machines without a GPU.
//
//   $ device_check --device cuda --mpiexec /usr/bin/mpirun
//   check                          ranks   cpu wall  cuda wall   cuda/cpu   loss diff  verdict
//   train --steps 20                   1     1.52 s     0.81 s      0.53x     2.1e-07  ok
//   ...
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/lab/main.h"
#include "labkit/lab/output.h"
#include "labkit/lab/table.h"

namespace cli = labkit::cli;
namespace lab = labkit::lab;
using labkit::Error;

namespace {

// One lab command, run on the CPU and on the device under test.
struct Check {
  std::string lab;
  std::string args;  // besides --device and --json
  int ranks;
  bool nccl = false;  // the device run goes under mpirun -np 1 --backend nccl; the CPU's on the simulator
  bool losses = true;  // false: no loss to compare (ring attention alone), each run held by its own check
};

// The labs that take --device, at 1, 2 and 4 ranks (8 where it fits one GPU's memory).
std::vector<Check> checks(bool nccl) {
  std::vector<Check> out = {{"train", "--steps 20 --print-every 10", 1}};
  for (const int ranks : {1, 2, 4, 8})
    out.push_back({"ddp", fmt::format("--ranks {} --batch 16 --steps 5", ranks), ranks});
  out.push_back({"ddp", "--ranks 4 --batch 16 --steps 5 --optimizer sgd --clip 1 --accum 2", 4});
  out.push_back({"ddp", "--ranks 4 --batch 16 --steps 5 --compress powersgd:2", 4});
  for (const int ranks : {2, 4, 8})
    out.push_back({"fsdp", fmt::format("--ranks {} --batch 16 --steps 5", ranks), ranks});
  out.push_back({"fsdp", "--ranks 4 --batch 16 --steps 5 --hsdp 2", 4});
  out.push_back({"fsdp", "--ranks 4 --batch 16 --steps 5 --stage 3 --hpz 2 --prefetch both", 4});
  out.push_back({"fsdp", "--ranks 4 --batch 16 --steps 5 --qwz", 4});
  out.push_back({"fsdp", "--ranks 16 --batch 16 --steps 3 --qgz", 16});
  for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zbv"})
    out.push_back({"pipeline", fmt::format("--stages 4 --schedule {} --steps 5", schedule), 4});
  for (const int ranks : {1, 2, 4}) out.push_back({"tp", fmt::format("--ranks {} --steps 5", ranks), ranks});
  out.push_back({"tp", "--ranks 4 --sp --steps 5", 4});
  for (const int ep : {1, 2, 4, 8})
    out.push_back({"moe", fmt::format("--ep {} --batch 16 --steps 5", ep), ep});
  out.push_back({"moe", "--ep 4 --batch 16 --steps 5 --balance bias --shared-experts 1", 4});
  out.push_back({.lab = "tp", .args = "--ranks 4 --cp 4", .ranks = 4, .losses = false});
  out.push_back({.lab = "tp", .args = "--ranks 4 --cp 2 --tp 2", .ranks = 4, .losses = false});
  if (nccl)  // every training lab under mpirun -np 1 --backend nccl
    for (const auto& [lab, args] : {std::pair{"ddp", "--batch 16 --steps 5"},
                                    {"ddp", "--batch 16 --steps 5 --compress powersgd:2"},
                                    {"fsdp", "--batch 16 --steps 5"},
                                    {"pipeline", "--stages 1 --steps 5"},
                                    {"tp", "--steps 5"},
                                    {"moe", "--ep 1 --batch 16 --steps 5"}})
      out.push_back({lab, args, 1, true});
  return out;
}

struct Run {
  int status = -1;
  double wall = 0;
  std::string output;
  std::vector<double> losses;  // every number under a key that names a loss, in document order
};

void collect_losses(const nlohmann::json& j, bool under_loss, std::vector<double>& out) {
  if (j.is_number() && under_loss) out.push_back(j.get<double>());
  if (j.is_array())
    for (const nlohmann::json& e : j) collect_losses(e, under_loss, out);
  if (j.is_object())
    for (const auto& [key, value] : j.items())
      collect_losses(value, under_loss || key.find("loss") != std::string::npos, out);
}

Run run(const std::string& command, const std::filesystem::path& json) {
  std::filesystem::remove(json);
  Run r;
  const auto started = std::chrono::steady_clock::now();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) throw Error("device_check: could not start " + command);
  char buffer[4096];
  while (const std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (r.status == 0 && std::filesystem::exists(json))
    collect_losses(nlohmann::json::parse(std::ifstream(json)), false, r.losses);
  return r;
}

// The largest relative difference between the two runs' losses; infinite where they differ in count.
double loss_difference(const Run& a, const Run& b) {
  if (a.losses.size() != b.losses.size() || a.losses.empty()) return INFINITY;
  double largest = 0;
  for (std::size_t i = 0; i < a.losses.size(); ++i)
    largest = std::max(largest, std::abs(a.losses[i] - b.losses[i]) / std::max(std::abs(a.losses[i]), 1e-30));
  return largest;
}

// Why a run failed: the last line a lab's error begins ("error: "), since
// under mpirun Open MPI's own words about the abort come after it; else the
// last line it printed.
std::string failure(const std::string& output) {
  const std::string text = "\n" + output.substr(0, output.find_last_not_of('\n') + 1);
  std::size_t from = text.rfind("\nerror: ");
  if (from == std::string::npos) from = text.find_last_of('\n');
  ++from;
  return text.substr(from, text.find('\n', from) - from);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"device_check: every lab that takes --device, on a device against the CPU"};
  std::string device = "fenced", mpiexec, labs = LABKIT_LABS_DIR, json, out = "out/device_check";
  std::vector<std::string> only;
  app.add_option("--device", device, "the device under test: cuda (a GPU), or fenced (CI's stand-in)")
      ->capture_default_str()->check(cli::one_of("device", {"cuda", "fenced"}));
  app.add_option("--mpiexec", mpiexec, "also run each lab under this mpirun, one process, --backend nccl (cuda)");
  app.add_option("--lab", only, "only this lab's rows (repeat for more; default: every lab that takes --device)")
      ->check(cli::one_of("lab", {"train", "ddp", "fsdp", "pipeline", "tp", "moe"}));
  app.add_option("--labs", labs, "the directory of the lab executables")->capture_default_str();
  app.add_option("--out", out, "where the runs write their JSON")->capture_default_str();
  app.add_option("--json", json, "also write the table as JSON to this file")->check(cli::output_file());
  return lab::run_main(app, argc, argv, [&] {
    if (!mpiexec.empty() && device != "cuda") throw Error("--mpiexec: the NCCL runs take --device cuda");
    std::filesystem::create_directories(out);
    // Bit for bit on the fenced device: the CPU's kernels, in the CPU's order.
    const double tolerance = device == "fenced" ? 0 : 1e-4;
    lab::Table table({{.header = "check", .key = "check", .width = 70, .align = lab::Align::left},
                      {.header = "ranks", .key = "ranks", .width = 5},
                      {.header = "cpu wall", .key = "cpu_wall", .width = 10},
                      {.header = device + " wall", .key = "device_wall", .width = 12},
                      {.header = device + "/cpu", .key = "ratio", .width = 11},
                      {.header = "loss diff", .key = "loss_difference", .width = 10},
                      {.header = "verdict", .key = "ok", .align = lab::Align::left, .gap = 2}});
    fmt::print("device_check: each lab on --device {} against --device cpu; losses within {:g} relative\n", device,
               tolerance);
    table.print_header();
    int failed = 0;
    for (const Check& c : checks(!mpiexec.empty())) {
      if (!only.empty() && std::find(only.begin(), only.end(), c.lab) == only.end()) continue;
      const std::string name = fmt::format("{} {}{}", c.lab, c.args, c.nccl ? " (nccl)" : "");
      const std::filesystem::path cpu_json = std::filesystem::path(out) / "cpu.json",
                                  device_json = std::filesystem::path(out) / (device + ".json");
      const std::string lab_path = (std::filesystem::path(labs) / c.lab).string();
      // Under mpirun -np gives the ranks; the simulator is told.
      const Run on_cpu = run(fmt::format("{} {}{} --device cpu --json {}", lab_path, c.args,
                                         c.nccl ? " --ranks 1" : "", cpu_json.string()), cpu_json);
      const std::string under = c.nccl ? mpiexec + " -np 1 " : "";
      const Run on_device = run(fmt::format("{}{} {}{} --device {} --json {}", under, lab_path, c.args,
                                            c.nccl ? " --backend nccl" : "", device, device_json.string()),
                                device_json);
      const double difference = c.losses ? loss_difference(on_cpu, on_device) : 0;
      const bool ok = on_cpu.status == 0 && on_device.status == 0 && difference <= tolerance;
      failed += !ok;
      const std::string verdict = ok                    ? "ok"
                                  : on_cpu.status != 0    ? "FAIL on cpu: " + failure(on_cpu.output)
                                  : on_device.status != 0 ? "FAIL on " + device + ": " + failure(on_device.output)
                                                          : "FAIL: the losses differ";
      table.add({name, c.ranks, lab::seconds(on_cpu.wall), lab::seconds(on_device.wall),
                 lab::number(on_device.wall / on_cpu.wall, "{:.2f}x"),
                 c.losses ? lab::number(difference, "{:.1e}") : lab::Cell{nlohmann::json(), "-"},
                 {ok, verdict}});
    }
    lab::write_json(json, table.json());
    if (failed) fmt::print("{} of the checks FAILED\n", failed);
    return failed ? 1 : 0;
  });
}

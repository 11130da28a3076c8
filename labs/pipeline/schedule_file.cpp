// --schedule-file: a schedule written by hand (schedules/*.txt), read into
// the same data the generators make, for the validator to judge.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "labkit/error.h"
#include "pipeline.h"

namespace pipeline_lab {

Schedule read_schedule(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("--schedule-file {}: cannot be read", path));
  std::vector<std::vector<std::pair<char, int>>> stages;
  int microbatches = 0, n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string head, token;
    words >> head;
    if (head != fmt::format("{}:", stages.size()))
      throw Error(fmt::format("--schedule-file {}: line {}: '{}' where stage {}'s line begins ('{}:')", path, n, head,
                              stages.size(), stages.size()));
    auto& actions = stages.emplace_back();
    while (words >> token) {
      int m = -1;
      const bool known = token.size() > 1 && std::string_view("FBIW").find(token[0]) != std::string_view::npos;
      if (!known || std::sscanf(token.c_str() + 1, "%d", &m) != 1 || m < 0 || m > 511 ||
          fmt::format("{}{}", token[0], m) != token)
        throw Error(fmt::format("--schedule-file {}: line {}: '{}' is not F, B, I or W and a micro-batch (0 to 511)",
                                path, n, token));
      actions.emplace_back(token[0], m);
      microbatches = std::max(microbatches, m + 1);
    }
  }
  if (stages.empty() || stages.size() > 64)
    throw Error(fmt::format("--schedule-file {}: {} stages (1 to 64)", path, stages.size()));
  const int P = int(stages.size());
  Schedule s = empty_schedule("by hand", P, std::max(microbatches, 1), 1, looped_placement(P, 1));
  for (int stage = 0; stage < P; ++stage)
    for (const auto& [kind, m] : stages[std::size_t(stage)])
      switch (kind) {
        case 'F': add_forward(s, m, stage); break;
        case 'B': add_backward(s, m, stage); break;
        case 'I': add_backward(s, m, stage, PipeOp::backward_input); break;
        default: s.actions[std::size_t(stage)].push_back({PipeOp::backward_weight, m, stage});
      }
  return s;
}

Schedule adopt_schedule_file(const CLI::App& app, Options& o) {
  Schedule s = read_schedule(o.schedule_file);
  for (const auto& [option, given, in_file] : {std::tuple{"--stages", o.stages, s.stages},
                                               std::tuple{"--microbatches", o.microbatches, s.microbatches}})
    if (app.count(option) && given != in_file)
      throw Error(fmt::format("{} {}: --schedule-file {} has {}", option, given, o.schedule_file, in_file));
  o.stages = s.stages, o.microbatches = s.microbatches;
  return s;
}

}  // namespace pipeline_lab

#include "labkit/lab/option_checks.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/error.h"

namespace labkit::cli {

std::vector<CLI::Option*> added_by(CLI::App& app, const std::function<void()>& add) {
  const std::vector<CLI::Option*> before = app.get_options();
  add();
  std::vector<CLI::Option*> added;
  for (CLI::Option* option : app.get_options())
    if (std::find(before.begin(), before.end(), option) == before.end()) added.push_back(option);
  return added;
}

void refuse_unread(const CLI::App& app, const std::string& run, const std::vector<std::string>& options) {
  for (const std::string& name : options) {
    const CLI::Option* option = app.get_option(name);
    if (option->count() == 0) continue;
    const std::string given =
        option->get_expected_min() == 0 ? name : fmt::format("{} {}", name, fmt::join(option->results(), " "));
    throw Error(fmt::format("{}: {} does not read it", given, run));
  }
}

}  // namespace labkit::cli

#include "labkit/cli.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/ranges.h>

#include "labkit/device.h"
#include "labkit/output.h"
#include "labkit/units.h"

namespace labkit::cli {

CLI::Validator one_of(const std::string& what, const std::vector<std::string>& names) {
  return {[=](std::string& text) -> std::string {
            for (const std::string& name : names)
              if (text == name) return "";
            return fmt::format("unknown {} '{}' ({})", what, text, fmt::join(names, ", "));
          },
          ""};
}

CLI::Validator parsed_by(std::function<void(const std::string&)> parse) {
  return {[parse = std::move(parse)](std::string& text) -> std::string {
            try {
              parse(text);
              return "";
            } catch (const std::exception& e) {
              return e.what();
            }
          },
          ""};
}

namespace {
void check_device_is_here(const std::string& name) {
  if (parse_device(name) == DeviceKind::cuda) cuda_device();  // throws why there is none
}
}  // namespace

CLI::Validator device() { return parsed_by(check_device_is_here); }

CLI::Validator timed_device() {
  return parsed_by([](const std::string& text) {
    if (text == "fenced")
      throw std::invalid_argument("fenced: the fenced device opens and closes its memory around every op, slow on "
                                  "purpose to test the GPU's path; time cpu or cuda");
    check_device_is_here(text);
  });
}

CLI::Validator byte_size(std::uint64_t min) {
  return {[min](std::string& text) -> std::string {
            try {
              if (parse_bytes(text) >= min) return "";
              return fmt::format("{} is out of range (must be >= {} bytes)", text, min);
            } catch (const std::exception& e) {
              return e.what();
            }
          },
          min > 0 ? fmt::format("(SIZE >= {})", min) : "(SIZE)"};
}

CLI::Validator output_file(std::vector<std::string> extensions) {
  namespace fs = std::filesystem;
  const std::string allowed = fmt::format("{}", fmt::join(extensions, " or "));
  return {[extensions, allowed](std::string& path) -> std::string {
            const std::string extension = fs::path(path).extension().string();
            if (!extensions.empty() && std::find(extensions.begin(), extensions.end(), extension) == extensions.end())
              return fmt::format("'{}': writes {} only, chosen by the extension", path, allowed);
            if (this_process_is_quiet()) return "";  // under mpirun rank 0 writes, and checks
            std::error_code error;
            if (fs::is_directory(path, error)) return fmt::format("'{}' is a folder, not a file", path);
            if (const fs::path folder = fs::path(path).parent_path(); !folder.empty()) {
              fs::create_directories(folder, error);
              if (error) return fmt::format("'{}': cannot create its folder {} ({})", path, folder.string(),
                                            error.message());
            }
            // Opened to append, so a file that is there is left as it is; one made here is removed.
            const bool existed = fs::exists(path, error);
            if (!std::ofstream(path, std::ios::app))
              return fmt::format("'{}' cannot be written ({})", path, std::strerror(errno));
            if (!existed) fs::remove(path, error);
            return "";
          },
          extensions.empty() ? "" : "(" + allowed + ")"};
}

namespace {

// Levenshtein's distance: the fewest one-character insertions, deletions and
// substitutions that make `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j < row.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0]++;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row.back();
}

// The option a mistyped `word` most likely meant ("--models" for "--modles" or
// "--list-models"), or "": the nearest by edits, if within a quarter of its
// length (2 at least), or one that holds the other whole.
std::string nearest_option(const CLI::App& app, std::string_view word) {
  if (!word.starts_with("--") || word.size() < 5) return "";
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, word.size() / 4) + 1;
  for (const CLI::Option* option : app.get_options())
    for (const std::string& name : option->get_lnames()) {
      const std::string candidate = "--" + name;
      const bool holds = name.size() >= 3 && word.size() >= 6 &&
                         (word.find(name) != std::string_view::npos || candidate.find(word) != std::string::npos);
      const std::size_t distance = edit_distance(word, candidate);
      if (distance < best_distance || (holds && best.empty())) best = candidate, best_distance = distance;
    }
  return best;
}

}  // namespace

void one_line_errors(CLI::App& app) {
  // A list option given one value twice ("--stage 1 --stage 1") ran it twice,
  // a row or a trace file each, the second over the first.
  app.parse_complete_callback([&app] {
    for (const CLI::Option* option : app.get_options()) {
      std::set<std::string> seen;
      for (const std::string& value : option->results())
        if (!seen.insert(value).second)
          throw CLI::ValidationError(option->get_name(), option->get_expected_min() == 0  // a flag
                                                             ? std::string("given twice")
                                                             : fmt::format("{} is given twice", value));
    }
  });
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) -> std::string {
    // Under mpirun every process reads the same command line: rank 0 says what is wrong.
    if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK"); rank && std::string(rank) != "0") return "";
    // An unknown option or a missing argument: say where the options are listed,
    // and which option a mistyped one most likely meant.
    const bool extra = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
    std::string meant;
    const std::vector<std::string> words = extra ? failed->remaining() : std::vector<std::string>{};
    for (const std::string& word : words)
      if (meant = nearest_option(*failed, word); !meant.empty()) {
        meant = fmt::format("{}did you mean {}? ", words.size() > 1 ? word + ": " : "", meant);
        break;
      }
    const bool usage = extra || dynamic_cast<const CLI::RequiredError*>(&e);
    return fmt::format("error: {}{}\n", e.what(), usage ? fmt::format(" ({}--help lists the options)", meant) : "");
  });
}

}  // namespace labkit::cli

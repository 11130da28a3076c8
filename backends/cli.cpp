#include "labkit/cli.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

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
  app.failure_message([](const CLI::App*, const CLI::Error& e) -> std::string {
    // Under mpirun every process reads the same command line: rank 0 says what is wrong.
    if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK"); rank && std::string(rank) != "0") return "";
    // An unknown option or a missing argument: say where the options are listed.
    const bool usage = dynamic_cast<const CLI::ExtrasError*>(&e) || dynamic_cast<const CLI::RequiredError*>(&e);
    return fmt::format("error: {}{}\n", e.what(), usage ? " (--help lists the options)" : "");
  });
}

}  // namespace labkit::cli

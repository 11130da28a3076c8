#include "labkit/output.h"

#include <cstdio>
#include <filesystem>

#include "labkit/error.h"

namespace labkit {

namespace {
bool quiet = false;
}

void quiet_this_process() {
  quiet = true;
  if (!std::freopen("/dev/null", "w", stdout)) throw Error("cannot quiet standard output");
}

bool this_process_is_quiet() { return quiet; }

std::ofstream create_file(const std::string& path) {
  if (quiet) return std::ofstream("/dev/null");
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ignored;
  if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  std::ofstream out(path);
  if (!out) throw Error("cannot write '" + path + "'");
  return out;
}

std::string_view gnuplot_terminal(const std::string& path) {
  return path.size() > 4 && path.substr(path.size() - 4) == ".png" ? "pngcairo" : "svg";
}

void run_gnuplot(const std::string& script) {
  if (quiet) return;
  FILE* gnuplot = popen("gnuplot", "w");
  if (!gnuplot) throw Error("--plot: cannot start gnuplot (apt-get install gnuplot-nox)");
  std::fputs(script.c_str(), gnuplot);
  if (pclose(gnuplot) != 0) throw Error("--plot: gnuplot failed");
}

}  // namespace labkit

#include "labkit/output.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <unistd.h>

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

void finish_file(std::ofstream& out, const std::string& path) {
  out.flush();
  if (!out) throw Error("cannot write '" + path + "': the disk is full, or the file went away");
}

// Under mpirun a rank's standard error is a pipe to mpirun, whatever mpirun's own
// is: ./labkit mpi says in LABKIT_TERMINAL that mpirun's is a terminal.
bool stderr_reaches_a_terminal() {
  static const bool terminal = isatty(STDERR_FILENO) || std::getenv("LABKIT_TERMINAL") != nullptr;
  return terminal;
}

void progress_line(const std::string& what) {
  if (quiet || !stderr_reaches_a_terminal()) return;
  std::fprintf(stderr, "\r\033[K%s", what.c_str());
  std::fflush(stderr);
}

std::string row_file(const std::string& path, std::string_view row) {
  const std::size_t name = path.find_last_of('/') + 1;  // 0 when there is no folder
  const std::size_t dot = path.find('.', name);
  if (dot == std::string::npos) return path + "." + std::string(row);
  return path.substr(0, dot) + "." + std::string(row) + path.substr(dot);
}

std::string_view gnuplot_terminal(const std::string& path) {
  return path.size() > 4 && path.substr(path.size() - 4) == ".png" ? "pngcairo" : "svg";
}

void run_gnuplot(const std::string& script, const std::string& path) {
  if (quiet) return;
  // Its standard output to nowhere: where it cannot open the figure, gnuplot
  // would draw it there, hundreds of lines of SVG in the lab's output.
  FILE* gnuplot = popen("gnuplot >/dev/null", "w");
  if (!gnuplot) throw Error("--plot: cannot start gnuplot (apt-get install gnuplot-nox)");
  std::fputs(script.c_str(), gnuplot);
  if (pclose(gnuplot) != 0) throw Error(fmt::format("--plot {}: gnuplot failed", path));
  // gnuplot exits 0 when it could not write the figure: a full disk leaves it empty.
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error) || std::filesystem::file_size(path, error) == 0)
    throw Error(fmt::format("--plot {}: gnuplot wrote nothing there (the disk is full, or it is not a file)", path));
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace labkit

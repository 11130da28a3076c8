#include "labkit/lab/bench.h"

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "labkit/error.h"

namespace labkit::lab {

void refuse_what_the_bench_cannot_time(const RunOptions& run_options, std::string_view device) {
  if (device == "fenced")
    throw Error("--bench --device fenced: the fenced device is slow on purpose (a test's); time cpu or cuda");
  if (run_options.backend != "sim")
    throw Error(fmt::format("--bench --backend {0}: it times the simulator, its simulated ranks against one rank; "
                            "--backend {0} has no simulator to time (./labkit bench all_reduce --backend mpi times "
                            "real collectives)",
                            run_options.backend));
}

double timed(std::string_view what, const std::function<void()>& body) {
  fmt::print("{} ...\n", what);
  std::fflush(stdout);  // the line shows while the run takes its seconds
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::json target(double measured, double at_most) {
  return {{"measured", measured}, {"at_most", at_most}, {"met", measured <= at_most}};
}

Table bench_table(int width, std::vector<Column> json_only) {
  std::vector<Column> columns = {{.header = "run", .width = width, .align = Align::left},
                                 {.header = "wall", .key = "seconds", .width = 10}};
  columns.insert(columns.end(), json_only.begin(), json_only.end());
  return Table(std::move(columns));
}

}  // namespace labkit::lab

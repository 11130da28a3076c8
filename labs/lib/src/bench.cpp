#include "labkit/lab/bench.h"

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

namespace labkit::lab {

double timed(std::string_view what, const std::function<void()>& body) {
  fmt::print("{} ...\n", what);
  std::fflush(stdout);  // the line shows while the run takes its seconds
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Table bench_table(int width, std::vector<Column> json_only) {
  std::vector<Column> columns = {{.header = "run", .width = width, .align = Align::left},
                                 {.header = "wall", .key = "seconds", .width = 10}};
  columns.insert(columns.end(), json_only.begin(), json_only.end());
  return Table(std::move(columns));
}

}  // namespace labkit::lab

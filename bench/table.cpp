#include "table.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "labkit/algorithms.h"

namespace labkit::bench {

namespace {
// nccl-tests' names for the element types (its "type" column).
std::string_view type_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
    case DType::bf16: return "bfloat16";
  }
  return "?";
}

std::string_view redop_name(const Table& t) { return has_reduce_op(t.bench.op) ? "sum" : "none"; }
int root_of(const Table& t) { return has_root(t.bench.op) ? 0 : -1; }

std::string_view description(const std::string& algo) {
  if (algo == "baseline") return " (a ring written directly against MPI_Sendrecv: no labkit layers)";
  if (algo == "native") return " (the backend's own collective)";
  return " (labkit, over the backend's point-to-point)";
}

void print_header(const std::string& algo) {
  fmt::print("#\n# algo: {}{}\n", algo, description(algo));
  fmt::print("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}{:^33}{:^33}\n", "", "", "", "", "", "out-of-place", "in-place");
  fmt::print("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n", "size",
             "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  fmt::print("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n", "(B)",
             "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

// Microseconds in nccl-tests' 7 characters: fewer decimals as the time grows.
std::string time_us(double seconds) {
  const double us = seconds * 1e6;
  return fmt::format("{:>7.{}f}", us, us >= 10000 ? 0 : us >= 100 ? 1 : 2);
}

// One row, in the columns of the mode the call runs in; the other mode's stay
// blank (nccl-tests leaves them blank too when it does not run one).
void print_row(const Table& table, const Row& row) {
  const Timing& t = row.timing;
  const std::string body = fmt::format("  {}  {:>6.2f}  {:>6.2f}  {:>6}", time_us(t.seconds), row.algbw(),
                                       row.busbw(table.bus_factor), t.wrong < 0 ? "N/A" : std::to_string(t.wrong));
  const std::string blank(body.size(), ' ');
  const bool in_place = table.bench.in_place;
  fmt::print("  {:>10}  {:>12}  {:>8}  {:>6}  {:>6}{}{}\n", row.bytes, row.count, type_name(table.dtype),
             redop_name(table), root_of(table), in_place ? blank : body, in_place ? body : blank);
}

// One ratio column; on one rank nothing crosses a bus (busbw 0), so no ratio.
std::string ratio(double busbw, double to) {
  return to > 0 ? fmt::format("  {:>13.2f}x", busbw / to) : fmt::format("  {:>14}", "n/a");
}

// Side by side: each algorithm's busbw, over the native collective's, and over the baseline's.
void print_side_by_side(const Table& table, const std::vector<std::string>& algos, const std::vector<Row>& rows) {
  std::map<std::pair<std::string, std::size_t>, double> busbw;
  for (const Row& r : rows) busbw[{r.algo, r.bytes}] = r.busbw(table.bus_factor);
  const bool has_baseline = std::find(algos.begin(), algos.end(), "baseline") != algos.end();
  const bool has_native = std::find(algos.begin(), algos.end(), "native") != algos.end();
  auto is_labkit = [](const std::string& a) { return a != "native" && a != "baseline"; };
  fmt::print("#\n# busbw side by side (GB/s){}{}\n", has_native ? ", and each labkit algorithm's ratio to native" : "",
             has_baseline ? " and to the baseline" : "");
  std::string head = fmt::format("# {:>10}", "size");
  for (const std::string& a : algos) head += fmt::format("  {:>14}", a);
  for (const std::string& a : algos)
    if (is_labkit(a)) {
      if (has_native) head += fmt::format("  {:>14}", a + "/native");
      if (has_baseline) head += fmt::format("  {:>14}", a + "/base");
    }
  fmt::print("{}\n", head);
  for (const Row& r : rows) {
    if (r.algo != algos.front()) continue;
    std::string line = fmt::format("  {:>10}", r.bytes);
    for (const std::string& a : algos) line += fmt::format("  {:>14.2f}", busbw[{a, r.bytes}]);
    for (const std::string& a : algos)
      if (is_labkit(a)) {
        if (has_native) line += ratio(busbw[{a, r.bytes}], busbw[{"native", r.bytes}]);
        if (has_baseline) line += ratio(busbw[{a, r.bytes}], busbw[{"baseline", r.bytes}]);
      }
    fmt::print("{}\n", line);
  }
}
}  // namespace

std::vector<Row> rows_of(const Timings& timings, const std::vector<std::string>& algos,
                         const std::vector<std::size_t>& counts, DType dtype) {
  std::vector<Row> rows;
  for (std::size_t count : counts)
    for (const std::string& algo : algos) rows.push_back({algo, count, count * size_of(dtype), timings.at({algo, count})});
  return rows;
}

std::int64_t print_table(const Table& table, const std::vector<std::string>& algos, const std::vector<Row>& rows) {
  std::int64_t total_wrong = 0;
  for (const std::string& algo : algos) {
    print_header(algo);
    double busbw_sum = 0;
    int sizes = 0;
    std::int64_t wrong = 0;
    for (const Row& row : rows) {
      if (row.algo != algo) continue;
      print_row(table, row);
      busbw_sum += row.busbw(table.bus_factor);
      ++sizes;
      wrong += std::max<std::int64_t>(row.timing.wrong, 0);
    }
    fmt::print("# Out of bounds values : {} {}\n", wrong, wrong ? "FAILED" : "OK");
    fmt::print("# Avg bus bandwidth    : {:.4f} \n", sizes ? busbw_sum / sizes : 0.0);
    total_wrong += wrong;
  }
  print_side_by_side(table, algos, rows);
  return total_wrong;
}

nlohmann::json json_row(const Table& table, const Row& row, int iters) {
  const nlohmann::json body = {{"time", row.timing.seconds * 1e6},
                               {"alg_bw", row.algbw()},
                               {"bus_bw", row.busbw(table.bus_factor)},
                               {"nwrong", row.timing.wrong < 0 ? nlohmann::json() : nlohmann::json(row.timing.wrong)}};
  const bool in_place = table.bench.in_place;
  return {{"size", row.bytes},
          {"count", row.count},
          {"type", type_name(table.dtype)},
          {"redop", redop_name(table)},
          {"root", root_of(table)},
          {"out_of_place", in_place ? nlohmann::json() : body},
          {"in_place", in_place ? body : nlohmann::json()},
          {"actual_iterations", iters},
          {"experiment_name", row.algo}};
}

}  // namespace labkit::bench

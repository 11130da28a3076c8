// nccl-tests' table, the one copy: the benchmark prints it for every collective,
// the ring lab's --compare for its allreduce algorithms. One section per
// algorithm (size, count, type, redop, root, then time, algbw, busbw and #wrong
// out of place and in place), each with nccl-tests' footer; then busbw side by
// side with each labkit algorithm's ratio to native (and to the bare-MPI baseline).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collective_bench.h"

namespace labkit::bench {

// One algorithm at one size, as nccl-tests reports it.
struct Row {
  std::string algo;
  std::size_t count;  // elements
  std::size_t bytes;  // count x the element size: nccl-tests' "size"
  Timing timing;

  double algbw() const { return bytes / timing.seconds / 1e9; }  // GB/s
  // On one rank nothing crosses a bus (factor 0): 0, even where the simulator's time is 0.
  double busbw(double bus_factor) const { return bus_factor > 0 ? algbw() * bus_factor : 0; }
};

// The sweep's timings as rows: by size, the algorithms in the order given at each.
std::vector<Row> rows_of(const Timings& timings, const std::vector<std::string>& algos,
                         const std::vector<std::size_t>& counts, DType dtype);

// What the table needs besides its rows.
struct Table {
  const CollectiveBench& bench;
  DType dtype;
  double bus_factor;  // bus_bandwidth_factor(bench.op, ranks)
};

// Every algorithm's section and footer, then busbw side by side; returns the wrong elements over all.
std::int64_t print_table(const Table& table, const std::vector<std::string>& algos, const std::vector<Row>& rows);

// One row in nccl-tests' JSON (its -J output), the algorithm as "experiment_name".
nlohmann::json json_row(const Table& table, const Row& row, int iters);

}  // namespace labkit::bench

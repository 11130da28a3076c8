// Lab 1's views, one file each: operations.cpp (each collective on every rank's
// buffer, before and after), identities.cpp (the identities that tie them
// together), mesh.cpp (the ranks laid out as a device mesh).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "labkit/comm.h"
#include "labkit/parallel/mesh.h"

namespace CLI {
class App;  // CLI11's, from <CLI/CLI.hpp> where options are added
}

namespace collectives_lab {

using labkit::Comm;

struct Options {
  std::string op = "all_reduce";
  int root = 0;
  std::string reduce_op = "sum";
  bool nonblocking = false;
  double compute = 0;  // seconds every rank computes beside each collective
};

// --op, --root, --reduce-op, --nonblocking and --compute.
void add_operation_options(CLI::App& app, Options& o);

// Throws where --root or --reduce-op was given to an --op that has no use for
// it, or an --algo NAME the --op has no algorithm of the name for (send_recv and
// deadlock: none at all), where it would run natively unannounced.
void refuse_unused_options(const CLI::App& app, const Options& o, const std::vector<std::string>& algos);

// What --op all runs, in this order; --op also takes "all" and "deadlock".
const std::vector<std::string>& every_operation();

// Runs operation `name` on every rank; rank 0 prints each rank's buffer before
// and after, and adds them to `report` (--json).
void show_operation(Comm& comm, const std::string& name, const Options& o, nlohmann::json& report);

// AllReduce == ReduceScatter + AllGather == Reduce + Broadcast, AllGather ==
// Gather + Broadcast, checked on every rank; rank 0 prints and reports each.
// Returns whether every identity held on every rank.
bool check_identities(Comm& comm, nlohmann::json& report);

// The ranks as a mesh of `dims`: rank 0 prints the map and its groups, after an
// all_reduce in each group checked them; --plot draws it.
void show_mesh(Comm& world, const std::vector<labkit::MeshDim>& dims, nlohmann::json& report,
               const std::string& plot);

}  // namespace collectives_lab

// Lab 1: the collectives, one at a time, with every rank's buffer before and after.
//
//   ./labkit lab collectives --op all_reduce --ranks 4
//
//   all_reduce(op=sum) on 4 ranks, algo native: 10.2 us
//             before      after
//   rank 0    [1 2 3]  ->  [10 14 18]
//   rank 1    [2 3 4]  ->  [10 14 18]
//   ...
//
// --op all runs every operation (operations.cpp), then checks the identities
// that tie them together (identities.cpp); --mesh pp=2,dp=2,tp=2 lays the ranks
// out as a device mesh instead, and --plot draws it (mesh.cpp).
#include <fmt/format.h>

#include "collectives_lab.h"
#include "labkit/error.h"
#include "labkit/lab/main.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/output.h"
#include "labkit/run.h"
#include "labkit/units.h"

using namespace labkit;
using namespace collectives_lab;

namespace {

// --op on every rank; --op all, every operation and then the identities. Returns whether they held.
bool show_operations(Comm& comm, const Options& o, nlohmann::json& report) {
  if (comm.rank() == 0 && o.compute > 0)
    fmt::print("every rank computes for {} beside each collective, {}\n\n", format_seconds(o.compute),
               o.nonblocking ? "while it is in flight" : "after it");
  if (o.op != "all") {
    show_operation(comm, o.op, o, report);
    return true;
  }
  for (const std::string& name : every_operation()) show_operation(comm, name, o, report);
  return check_identities(comm, report);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 1: what each collective does, rank by rank"};
  Options o;
  RunOptions run_options;
  add_operation_options(app, o);
  std::string json_path, mesh, plot;
  app.add_option("--json", json_path, "also write what is printed as JSON to this file")->check(cli::output_file());
  app.add_option("--mesh", mesh, "lay the ranks out as a device mesh, e.g. pp=2,dp=2,tp=2 (the last dimension "
                                 "varies fastest), and print each rank's coordinates instead of running --op")
      ->check(cli::parsed_by(parse_mesh_dims));
  app.add_option("--plot", plot, "--mesh: draw the ranks by node to this SVG or PNG (gnuplot)")
      ->check(cli::figure_file());
  add_run_options(app, run_options);
  return lab::run_main(app, argc, argv, [&] {
    if (!plot.empty() && mesh.empty()) throw Error(fmt::format("--plot {}: draws --mesh (add it)", plot));
    for (const char* option : {"--op", "--root", "--reduce-op", "--nonblocking", "--compute", "--algo"})
      if (!mesh.empty() && app.count(option))
        throw Error(fmt::format("{}: --mesh {} prints the ranks' coordinates and runs no --op", option, mesh));
    refuse_unused_options(app, o, run_options.algos);
    if ((o.op == "send_recv" || o.op == "deadlock") && run_options.ranks == 1)
      throw Error(fmt::format("--op {}: on 1 rank there is no neighbour to send to (a rank cannot message itself): "
                              "--ranks 2 or more", o.op));
    if (run_options.payload_free)
      throw Error("--payload-free: the lab shows the values each rank holds, and a payload-free run moves none "
                  "(ring_allreduce --compare and --scale time sizes alone)");
    const std::vector<MeshDim> mesh_dims = mesh.empty() ? std::vector<MeshDim>{} : parse_mesh_dims(mesh);
    int product = 1;  // at most 2^20 (parse_mesh_dims)
    for (const MeshDim& d : mesh_dims) product *= d.size;
    if (!mesh_dims.empty() && !run_options.ranks_given) run_options.ranks = product;  // under mpirun, -np decides
    bool identities_hold = true;
    nlohmann::json report = nlohmann::json::array();  // what rank 0 printed, for --json
    run(run_options, [&](Comm& comm) {
      if (!mesh_dims.empty()) return show_mesh(comm, mesh_dims, report, plot);
      if (!show_operations(comm, o, report)) identities_hold = false;
    });
    lab::write_json(json_path, report);
    return identities_hold ? 0 : 1;
  });
}

#include "labkit/run.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/algorithms.h"
#include "labkit/error.h"
#include "labkit/output.h"
#include "sim/engine.h"
#ifdef LABKIT_HAVE_MPI
#include "mpi/mpi_run.h"
#endif
#ifdef LABKIT_HAVE_NCCL
#include "nccl/nccl_comm.h"
#endif

namespace labkit {

void add_run_options(CLI::App& app, RunOptions& o) {
  app.add_option("--backend", o.backend, "sim (simulated cluster), mpi (processes under mpirun) or nccl (a GPU per process)")->capture_default_str();
  app.add_option("--ranks", o.ranks, "number of ranks (under mpirun: -np, unless given)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20))
      ->each([&o](const std::string&) { o.ranks_given = true; });
  app.add_option("--topology", o.topology, "dgx-h100, dgx-a100, pcie, ethernet, or a JSON file")->capture_default_str();
  app.add_option("--trace", o.trace, "write a Chrome trace (Perfetto) to this file");
  app.add_option("--algo", o.algos, "NAME or COLLECTIVE=NAME: run collectives as a labkit algorithm, not native");
  app.add_flag("--payload-free", o.payload_free, "move sizes only (what-if runs at scale)");
  app.add_option("--efficiency", o.efficiency, "fraction of device peak FLOP/s that compute reaches")
      ->capture_default_str()->check(CLI::Range(1e-6, 1.0));
  app.add_option("--straggler", o.stragglers, "RANK:SPEED, e.g. 2:0.5 makes rank 2 compute at half speed");
  app.add_option("--deadlock-timeout", o.deadlock_timeout, "mpi: seconds a wait may make no progress")
      ->capture_default_str();
  if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK"); rank && std::string(rank) != "0") quiet_this_process();
}

namespace {
// "--algo ring" sets ring wherever a collective has it; "--algo all_reduce=ring" one.
void apply_algorithms(Comm& comm, const std::vector<std::string>& algos) {
  for (const std::string& spec : algos) {
    const auto eq = spec.find('=');
    if (eq != std::string::npos) {
      comm.set_algorithm(parse_collective(spec.substr(0, eq)), spec.substr(eq + 1));
      continue;
    }
    if (spec == "native") {
      for (Collective c : kCollectives) comm.set_algorithm(c, "native");
      continue;
    }
    bool found = false;
    for (const Algorithm& a : all_algorithms())
      if (a.name == spec) {
        comm.set_algorithm(a.op, spec);
        found = true;
      }
    if (!found) {
      std::set<std::string_view> names;
      for (const Algorithm& a : all_algorithms()) names.insert(a.name);
      throw Error(fmt::format("--algo {}: no collective has an algorithm of that name (known: native, {})", spec,
                              fmt::join(names, ", ")));
    }
  }
}

std::vector<double> parse_speeds(const RunOptions& o) {
  std::vector<double> speed(o.ranks, 1.0);
  for (const std::string& s : o.stragglers) {
    int rank = -1;
    double factor = 0;
    if (std::sscanf(s.c_str(), "%d:%lf", &rank, &factor) != 2 || rank < 0 || rank >= o.ranks || factor <= 0)
      throw Error(fmt::format("--straggler {}: expected RANK:SPEED with 0 <= RANK < {} and SPEED > 0", s, o.ranks));
    speed[rank] = factor;
  }
  return speed;
}
}  // namespace

RunResult run(const RunOptions& o, const RankFn& rank_fn) {
  const RankFn with_algorithms = [&](Comm& comm) {
    apply_algorithms(comm, o.algos);
    rank_fn(comm);
  };
  if (o.backend == "mpi") {
#ifdef LABKIT_HAVE_MPI
    return mpi::run(o, with_algorithms);
#else
    throw Error("--backend mpi: this build has no MPI (install libopenmpi-dev and rebuild; ./labkit does)");
#endif
  }
  if (o.backend == "nccl") {
#ifdef LABKIT_HAVE_NCCL
    return mpi::run(o, with_algorithms, nccl::make_comm);
#else
    throw Error("--backend nccl: this build has no NCCL backend (it is built when CMake finds CUDA, NCCL and MPI)");
#endif
  }
  if (o.backend != "sim") throw Error(fmt::format("--backend {}: unknown backend (sim, mpi, nccl)", o.backend));
  std::shared_ptr<Trace> trace = o.trace.empty() && !o.keep_trace ? nullptr : std::make_shared<Trace>(o.ranks);
  sim::Engine engine({.ranks = o.ranks,
                      .topology = find_topology(o.topology),
                      .payload = !o.payload_free,
                      .efficiency = o.efficiency,
                      .speed = parse_speeds(o),
                      .trace = trace.get(),
                      .stop_at = o.stop_at,
                      .progress = o.progress});
  engine.run(with_algorithms);
  if (!o.trace.empty()) trace->write_chrome_json(o.trace, o.backend);
  return {engine.elapsed(), engine.messages(), trace};
}

}  // namespace labkit

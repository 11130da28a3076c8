#include "labkit/run.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/algorithms.h"
#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/output.h"
#include "labkit/units.h"
#include "sim/engine.h"
#ifdef LABKIT_HAVE_MPI
#include "mpi/mpi_run.h"
#endif
#ifdef LABKIT_HAVE_NCCL
#include "nccl/nccl_comm.h"
#endif

namespace labkit {

namespace {
// What one --algo sets: "all_reduce=ring" one collective's algorithm, "ring"
// that of every collective that has one of the name, "native" every collective's.
std::vector<std::pair<Collective, std::string>> algorithm_choices(const std::string& spec) {
  if (const auto eq = spec.find('='); eq != std::string::npos) {
    const Collective c = parse_collective(spec.substr(0, eq));
    const std::string name = spec.substr(eq + 1);
    check_algorithm(c, name);
    return {{c, name}};
  }
  std::vector<std::pair<Collective, std::string>> choices;
  for (Collective c : kCollectives)
    if (spec == "native" || find_algorithm(c, spec)) choices.emplace_back(c, spec);
  if (choices.empty()) {
    std::set<std::string_view> names;
    for (const Algorithm& a : all_algorithms()) names.insert(a.name);
    throw Error(fmt::format("unknown algorithm '{}' (known: native, {})", spec, fmt::join(names, ", ")));
  }
  return choices;
}

// "RANK:SPEED" of --straggler.
std::pair<int, double> parse_straggler(const std::string& spec) {
  int rank = -1;
  double speed = 0;
  char extra = 0;
  if (std::sscanf(spec.c_str(), "%d:%lf%c", &rank, &speed, &extra) != 2 || rank < 0 || !(speed > 0) ||
      !std::isfinite(speed))
    throw Error(fmt::format("'{}' is not RANK:SPEED with RANK >= 0 and SPEED > 0 (e.g. 2:0.5)", spec));
  return {rank, speed};
}
// The processes mpirun started (its -np), from the environment it gives them,
// before MPI starts; 1 outside mpirun.
int mpirun_processes() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  return size ? std::atoi(size) : 1;
}

}  // namespace

void add_run_options(CLI::App& app, RunOptions& o, RunOptionSet set) {
  // The options only one kind of backend reads remember being given, so that
  // the other refuses them even at their defaults ("--efficiency 0.5" under mpirun).
  const auto remember = [&o](std::string name) { return [&o, name](const std::string&) { o.given.insert(name); }; };
  // Under mpirun -np gives the ranks, unless --ranks does (it is read after --backend): a lab checks its
  // shape against them before MPI starts, as on the simulator.
  app.add_option("--backend", o.backend, "sim (simulated cluster), mpi (processes under mpirun) or nccl (a GPU per process)")
      ->capture_default_str()->check(cli::one_of("backend", {"sim", "mpi", "nccl"}))
      ->each([&o](const std::string& backend) { if (backend != "sim") o.ranks = mpirun_processes(); });
  app.add_option("--ranks", o.ranks, "number of ranks (under mpirun: -np, unless given)")
      ->capture_default_str()
      ->check(cli::in_range(1, 1 << 20))
      ->each([&o](const std::string&) { o.ranks_given = true; });
  app.add_option("--topology", o.topology,
                 "sim: the cluster simulated (a lab that models with it reads it on any backend): dgx-h100, dgx-a100, "
                 "pcie, ethernet, ib-ndr, or a JSON file")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& t) { find_topology(t); }))
      ->each(remember("--topology"));
  app.add_option("--network", o.network, "sim: fair (messages on one port share its bandwidth, as SimGrid "
                 "models it) or serial (a port carries one message at a time)")
      ->capture_default_str()->check(cli::one_of("network", {"fair", "serial"}))->each(remember("--network"));
  app.add_option("--trace", o.trace, "write a Chrome trace (Perfetto) to this file")->check(cli::output_file());
  app.add_flag("--payload-free", o.payload_free, "move sizes only (what-if runs at scale)");
  if (set == RunOptionSet::all) {
    app.add_option("--algo", o.algos, "NAME or COLLECTIVE=NAME: run collectives as a labkit algorithm, not native")
        ->check(cli::parsed_by(algorithm_choices));
    app.add_option("--efficiency", o.efficiency, "sim: fraction of device peak FLOP/s that compute reaches")
        ->capture_default_str()->check(cli::above(0.0, 1.0))->each(remember("--efficiency"));
    app.add_option("--straggler", o.stragglers, "sim: RANK:SPEED, e.g. 2:0.5 makes rank 2 compute at half speed")
        ->check(cli::parsed_by(parse_straggler));
  }
  app.add_option("--deadlock-timeout", o.deadlock_timeout, "mpi: seconds a wait may make no progress")
      ->capture_default_str()->check(cli::above(0.0))->each(remember("--deadlock-timeout"));
  CLI::Option* fail = app.add_option("--fail-rank", o.fail_rank, "stop this rank at time --at (sim: virtual time; "
                                     "mpi: its process is killed)")->check(cli::at_least(0));
  CLI::Option* at = app.add_option_function<std::string>(
                           "--at", [&o](const std::string& t) { o.fail_at = parse_seconds(t); },
                           "when --fail-rank's rank stops, e.g. 10us, 2.5ms, 1s")
                        ->check(cli::parsed_by([](const std::string& t) { parse_seconds(t); }));
  fail->needs(at);
  at->needs(fail);
  if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK"); rank && std::string(rank) != "0") quiet_this_process();
}

namespace {
void apply_algorithms(Comm& comm, const std::vector<std::string>& algos) {
  for (const std::string& spec : algos)
    for (const auto& [collective, name] : algorithm_choices(spec)) use_algorithm(comm, collective, name);
}

// Every collective the runs called, and how each ran: on the simulator every
// rank's, all in this process; under mpirun, in rank 0's process, every rank's
// (gathered there), and nothing in the others.
Comm::CollectiveCalls& calls_this_process() {
  static Comm::CollectiveCalls calls;
  return calls;
}

// What the simulator's runs of this process did that its options shape: the
// ranks that computed for any time, and the point-to-point messages delivered.
struct Simulated {
  std::set<int> ranks_that_computed;
  std::uint64_t messages = 0;
};
Simulated& simulated_this_process() {
  static Simulated simulated;
  return simulated;
}

// Every rank's collective calls, on rank 0 (an instrument: untimed); nothing
// on the others. A call travels as its collective and algorithm, by number.
Comm::CollectiveCalls gather_collective_calls(Comm& comm) {
  struct Calls {
    Collective op;
    int algorithm;  // in all_algorithms(); -1: native
    std::uint64_t count;
  };
  const std::span<const Algorithm> algorithms = all_algorithms();
  std::vector<Calls> mine;
  for (const auto& [how, count] : comm.collective_calls()) {
    const auto a = std::find_if(algorithms.begin(), algorithms.end(),
                                [&](const Algorithm& x) { return x.op == how.first && x.name == how.second; });
    mine.push_back({how.first, a == algorithms.end() ? -1 : int(a - algorithms.begin()), count});
  }
  Comm::CollectiveCalls all;
  for (const std::vector<Calls>& rank : comm.gather_objects(mine))
    for (const Calls& c : rank)
      all[{c.op, c.algorithm < 0 ? std::string_view("native") : algorithms[std::size_t(c.algorithm)].name}] += c.count;
  return all;
}

std::vector<double> parse_speeds(const RunOptions& o) {
  std::vector<double> speed(o.ranks, 1.0);
  std::set<int> given;
  for (const std::string& s : o.stragglers) {
    const auto [rank, factor] = parse_straggler(s);
    if (rank >= o.ranks)
      throw Error(fmt::format("--straggler {}: there is no rank {} among {} ranks", s, rank, o.ranks));
    if (!given.insert(rank).second)
      throw Error(fmt::format("--straggler {}: rank {} is given a speed twice ({:g} before)", s, rank, speed[rank]));
    speed[rank] = factor;
  }
  return speed;
}
}  // namespace

std::string_view ranks_flag(const RunOptions& o) { return o.backend == "sim" || o.ranks_given ? "--ranks" : "-np"; }

void (*before_ranks_start)(const RunOptions&) = nullptr;

namespace {
// The options one kind of backend reads and the other has no use for, refused
// by name rather than ignored: the simulator models the network, the speed of
// compute and stragglers, where real processes take the time they take; a real
// backend watches for a deadlock that the simulator sees the moment it happens.
void refuse_options_of_the_other_backend(const RunOptions& o) {
  const RunOptions defaults;
  const auto set = [&](bool changed, const char* name) { return changed || o.given.contains(name); };
  if (o.backend == "sim") {
    if (set(o.deadlock_timeout != defaults.deadlock_timeout, "--deadlock-timeout"))
      throw Error(fmt::format("--deadlock-timeout {:g}: the simulator reports a deadlock when it happens; the "
                              "timeout is for real processes (--backend mpi, nccl)", o.deadlock_timeout));
    return;
  }
  const std::string where = fmt::format("under --backend {} ", o.backend);
  if (set(o.topology != defaults.topology, "--topology") && !o.lab_reads_topology)
    throw Error(fmt::format("--topology {}: the simulator's devices and links; {}the machine's own run the work",
                            o.topology, where));
  if (set(o.network != defaults.network, "--network"))
    throw Error(fmt::format("--network {}: how the simulator shares a port; {}the machine's network does", o.network,
                            where));
  if (set(o.efficiency != defaults.efficiency, "--efficiency"))
    throw Error(fmt::format("--efficiency {:g}: the simulator's speed of compute; {}work takes the time it takes",
                            o.efficiency, where));
  if (!o.stragglers.empty())
    throw Error(fmt::format("--straggler {}: the simulator slows a rank's compute; {}each rank runs at its own speed",
                            o.stragglers.front(), where));
}

// run() on the backend the options name, before the checks of what it returns.
RunResult run_on_backend(const RunOptions& o, const RankFn& rank_fn) {
  refuse_options_of_the_other_backend(o);
  const RankFn with_algorithms = [&](Comm& comm) {
    apply_algorithms(comm, o.algos);
    rank_fn(comm);
    // On the simulator every rank runs in this process; under mpirun rank 0's
    // process gathers what every process's rank ran, and it alone checks --algo.
    if (o.backend == "sim")
      for (const auto& [how, calls] : comm.collective_calls()) calls_this_process()[how] += calls;
    else
      for (const auto& [how, calls] : gather_collective_calls(comm)) calls_this_process()[how] += calls;
  };
  // Sizes with no bytes behind them have no time but the simulator's (a real
  // backend would be handed buffers that are not there).
  if (o.payload_free && o.backend != "sim")
    throw Error(fmt::format("--backend {}: a payload-free run (--what-if, --sweep, --payload-free: sizes without "
                            "bytes) runs on the simulator only",
                            o.backend));
  if (o.backend == "mpi") {
#ifdef LABKIT_HAVE_MPI
    return mpi::run(o, with_algorithms);
#else
    throw Error("--backend mpi: this build has no MPI (install libopenmpi-dev and rebuild; ./labkit does)");
#endif
  }
  if (o.backend == "nccl") {
    if (o.fail_rank >= 0) throw Error("--fail-rank: the sim and mpi backends fail ranks; nccl does not");
#ifdef LABKIT_HAVE_NCCL
    return mpi::run(o, with_algorithms, nccl::make_comm);
#else
    throw Error("--backend nccl: this build has no NCCL backend (it is built when CMake finds CUDA, NCCL and MPI)");
#endif
  }
  if (o.backend != "sim") throw Error(fmt::format("--backend {}: unknown backend (sim, mpi, nccl)", o.backend));
  if (o.fail_rank >= o.ranks)
    throw Error(fmt::format("--fail-rank {0}: there is no rank {0} among {1} ranks", o.fail_rank, o.ranks));
  Topology topology = find_topology(o.topology);
  std::vector<double> speed = parse_speeds(o);
  if (before_ranks_start) before_ranks_start(o);
  std::shared_ptr<Trace> trace = o.trace.empty() && !o.keep_trace ? nullptr : std::make_shared<Trace>(o.ranks);
  sim::Engine engine({.ranks = o.ranks,
                      .topology = std::move(topology),
                      .payload = !o.payload_free,
                      .efficiency = o.efficiency,
                      .speed = std::move(speed),
                      .trace = trace.get(),
                      .stop_at = o.stop_at,
                      .progress = o.progress,
                      .fail_rank = o.fail_rank,
                      .fail_at = o.fail_at,
                      .network = o.network == "serial" ? sim::Network::serial : sim::Network::fair});
  const auto write_trace = [&] {
    if (!o.trace.empty()) trace->write_chrome_json(o.trace, o.backend);
  };
  try {
    engine.run(with_algorithms);
  } catch (const Error&) {
    write_trace();  // a failed rank, a deadlock, a rank's error: the trace shows where, and what that cut short
    throw;
  }
  write_trace();
  for (int r = 0; r < o.ranks; ++r)
    if (engine.computed()[r]) simulated_this_process().ranks_that_computed.insert(r);
  simulated_this_process().messages += engine.messages();
  // A run that returns had no failure: the rank finished before its time came
  // (a run stopped early, o.stop_at, may end before it too).
  const bool finished_first = o.fail_rank >= 0 && std::isinf(o.stop_at);
  return {engine.elapsed(), engine.messages(), trace, finished_first ? engine.failing_rank_time() : -1};
}
}  // namespace

RunResult run(const RunOptions& o, const RankFn& rank_fn) {
  RunResult result = run_on_backend(o, rank_fn);
  if (result.fail_rank_finished >= 0)
    throw Error(fmt::format("--fail-rank {} --at {}: changed nothing: rank {} finished at t = {}, before it was to "
                            "fail (an --at before then fails it)",
                            o.fail_rank, format_seconds(o.fail_at), o.fail_rank,
                            format_seconds(result.fail_rank_finished)));
  return result;
}

namespace {
void check_algorithms_ran(const std::vector<std::string>& algos) {
  const Comm::CollectiveCalls& calls = calls_this_process();
  std::vector<std::string> ran;  // "all_reduce (ring)"
  for (const auto& [how, count] : calls) ran.push_back(fmt::format("{} ({})", name_of(how.first), how.second));
  for (const std::string& spec : algos) {
    const auto choices = algorithm_choices(spec);
    if (std::any_of(choices.begin(), choices.end(), [&](const auto& choice) {
          return choice.second == "native" || calls.contains({choice.first, std::string_view(choice.second)});
        }))
      continue;
    const bool one = spec.find('=') != std::string::npos;
    throw Error(fmt::format("--algo {}: changed nothing: no {} ran with {} ({})", spec,
                            one ? name_of(choices.front().first) : "collective", choices.front().second,
                            ran.empty() ? "no collective ran at all" : fmt::format("what ran: {}", fmt::join(ran, ", "))));
  }
}

// What --option was given, or nothing where the program does not take it.
std::vector<std::string> given(const CLI::App& app, const std::string& option) {
  const CLI::Option* o = app.get_option_no_throw(option);
  return o ? o->results() : std::vector<std::string>{};
}
}  // namespace

void check_run_options_took_effect(const CLI::App& app) {
  check_algorithms_ran(given(app, "--algo"));
  const Simulated& simulated = simulated_this_process();
  if (const auto efficiency = given(app, "--efficiency"); !efficiency.empty() && simulated.ranks_that_computed.empty())
    throw Error(fmt::format("--efficiency {}: changed nothing: no rank computed on the simulator (it sets how fast "
                            "they compute)", efficiency.front()));
  for (const std::string& spec : given(app, "--straggler"))
    if (const int rank = parse_straggler(spec).first; !simulated.ranks_that_computed.contains(rank))
      throw Error(fmt::format("--straggler {}: changed nothing: rank {} computed nothing on the simulator (it slows "
                              "a rank's compute)", spec, rank));
  if (const auto network = given(app, "--network"); !network.empty() && simulated.messages == 0)
    throw Error(fmt::format("--network {}: changed nothing: no rank sent a message (it shares the ports between "
                            "messages; native collectives are costed by the NCCL model, and --algo runs them as "
                            "messages)", network.front()));
}

}  // namespace labkit

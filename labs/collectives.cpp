// Lab 1: the collectives, one at a time, with every rank's buffer before and after.
//
//   ./labkit lab collectives --op all_reduce --ranks 4
//
//   all_reduce(op=sum) on 4 ranks, algo native: 2.00 us
//            before       after
//   rank 0   [1 2 3]  ->  [10 14 18]
//   rank 1   [2 3 4]  ->  [10 14 18]
//   ...
//
// The inputs are the reading's (reading/000, "Chapter 1", "Collective Operations"). --op all
// runs every operation, then checks the identities that tie them together:
// AllReduce == ReduceScatter + AllGather == Reduce + Broadcast, and
// AllGather == Gather + Broadcast.
//
//   ./labkit lab collectives --mesh pp=2,dp=2,tp=2 --ranks 8 --plot mesh.svg
//
// lays the ranks out as a device mesh (parallel/mesh.h, tp innermost as in
// Megatron) and prints each rank's node and coordinates, and each dimension's
// groups; --plot draws the ranks by node.
#include <fstream>
#include <functional>
#include <numeric>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/output.h"
#include "labkit/parallel/mesh.h"
#include "labkit/parallel/mesh_map.h"
#include "labkit/run.h"
#include "labkit/units.h"

using namespace labkit;

namespace {

using Values = std::vector<float>;

Values make(std::size_t n, const std::function<float(std::size_t)>& f) {
  Values v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = f(i);
  return v;
}

// Runs `call` on every rank and has rank 0 print each rank's `in` before and
// `out` after, and add them to `report` (--json).
void show_buffers(Comm& comm, nlohmann::json& report, const std::string& title, Values& in, Values& out,
                  const std::function<void()>& call) {
  const auto before = comm.inspect(view_of(in));
  std::vector<double> clock = {comm.now(), 0};
  call();
  clock[1] = comm.now();
  const auto after = comm.inspect(view_of(out));
  const auto clocks = comm.inspect(view_of(clock));
  if (comm.rank() != 0) return;
  double start = clocks[0][0], end = 0;
  for (const auto& c : clocks) start = std::min(start, c[0]), end = std::max(end, c[1]);
  fmt::print("{}: {}\n", title, format_seconds(end - start));
  report.push_back({{"title", title}, {"seconds", end - start}, {"before", before}, {"after", after}});
  std::vector<std::string> left;
  std::size_t width = 6;
  for (const auto& row : before) width = std::max(width, left.emplace_back(fmt::format("[{:g}]", fmt::join(row, " "))).size());
  fmt::print("          {:<{}}     after\n", "before", width);
  for (int r = 0; r < comm.size(); ++r)
    fmt::print("rank {:<3}  {:<{}}  ->  [{:g}]\n", r, left[r], width, fmt::join(after[r], " "));
  fmt::print("\n");
}

struct Options {
  std::string op = "all_reduce";
  int root = 0;
  std::string reduce_op = "sum";
  bool nonblocking = false;
  double compute = 0;  // seconds every rank computes beside each collective
};

// A collective as asked: blocking, then --compute's work; or (--nonblocking)
// started on the rank's communication stream, the work done while it is in
// flight, then waited for. The buffers come out the same; the time is the sum
// of the two, or the longer of them.
void collective(Comm& comm, const Options& o, const CollectiveCall& call) {
  if (!o.nonblocking) {
    comm.run(call);
    if (o.compute > 0) comm.compute_for("compute", o.compute);
    return;
  }
  Request in_flight = comm.start(call);
  if (o.compute > 0) comm.compute_for("compute", o.compute);
  in_flight.wait();
}

std::string with_algo(Comm& comm, Collective c, const std::string& what) {
  return fmt::format("{} on {} ranks, algo {}", what, comm.size(), comm.algorithm(c));
}

void demo(Comm& comm, const std::string& name, const Options& o, nlohmann::json& report) {
  auto show = [&](Comm& c, const std::string& title, Values& in, Values& out, const std::function<void()>& call) {
    show_buffers(c, report, title, in, out, call);
  };
  const int p = comm.size(), r = comm.rank(), root = o.root;
  const ReduceOp op = parse_reduce_op(o.reduce_op);
  const std::string reduce_args = "op=" + o.reduce_op;
  if (name == "broadcast") {
    Values buf = make(3, [&](std::size_t i) { return r == root ? 10.0f * (i + 1) : 0.0f; });
    show(comm, with_algo(comm, Collective::broadcast, fmt::format("broadcast(root={})", root)), buf, buf,
         [&] { collective(comm, o, {Collective::broadcast, {}, view_of(buf), op, root}); });
  } else if (name == "reduce") {
    Values buf = make(3, [&](std::size_t i) { return float(r + 1 + i); });
    show(comm, with_algo(comm, Collective::reduce, fmt::format("reduce({}, root={})", reduce_args, root)), buf, buf,
         [&] { collective(comm, o, {Collective::reduce, {}, view_of(buf), op, root}); });
  } else if (name == "all_reduce") {
    Values buf = make(3, [&](std::size_t i) { return float(r + 1 + i); });
    show(comm, with_algo(comm, Collective::all_reduce, "all_reduce(" + reduce_args + ")"), buf, buf,
         [&] { collective(comm, o, {Collective::all_reduce, {}, view_of(buf), op, 0}); });
  } else if (name == "gather") {
    Values in = make(2, [&](std::size_t i) { return float(r * 10 + i + 1); }), out(r == root ? 2 * p : 0);
    show(comm, with_algo(comm, Collective::gather, fmt::format("gather(root={})", root)), in, out,
         [&] { collective(comm, o, {Collective::gather, view_of(in), view_of(out), op, root}); });
  } else if (name == "scatter") {
    Values in = r == root ? make(2 * p, [](std::size_t i) { return float(i / 2 * 10 + i % 2 + 1); }) : Values{};
    Values out(2);
    show(comm, with_algo(comm, Collective::scatter, fmt::format("scatter(root={})", root)), in, out,
         [&] { collective(comm, o, {Collective::scatter, view_of(in), view_of(out), op, root}); });
  } else if (name == "all_gather") {
    Values in = make(2, [&](std::size_t i) { return float(r * 10 + i + 1); }), out(2 * p);
    show(comm, with_algo(comm, Collective::all_gather, "all_gather"), in, out,
         [&] { collective(comm, o, {Collective::all_gather, view_of(in), view_of(out), op, 0}); });
  } else if (name == "reduce_scatter") {
    // Rank r contributes [r*10+i, r*10+i+1] for each block i.
    Values in = make(2 * p, [&](std::size_t i) { return float(r * 10 + i / 2 + i % 2); }), out(2);
    show(comm, with_algo(comm, Collective::reduce_scatter, "reduce_scatter(" + reduce_args + ")"), in, out,
         [&] { collective(comm, o, {Collective::reduce_scatter, view_of(in), view_of(out), op, 0}); });
  } else if (name == "all_to_all") {
    // Block d of rank r is [r*100 + d*10 + 1, +2]: the digits say who sent it to whom.
    Values in = make(2 * p, [&](std::size_t i) { return float(r * 100 + i / 2 * 10 + i % 2 + 1); }), out(2 * p);
    show(comm, with_algo(comm, Collective::all_to_all, "all_to_all"), in, out,
         [&] { collective(comm, o, {Collective::all_to_all, view_of(in), view_of(out), op, 0}); });
  } else if (name == "all_to_allv") {
    // Blocks of any size, as an MoE layer dispatches tokens: rank r sends (r + d) % 3
    // elements to rank d, [r*100 + d*10 + 1, ...]. The receivers learn their counts
    // from one small all_to_all first (exchange_counts).
    std::vector<std::size_t> send_counts(p);
    for (int d = 0; d < p; ++d) send_counts[d] = std::size_t(r + d) % 3;
    const std::vector<std::size_t> recv_counts = comm.exchange_counts(send_counts);
    Values in, out(std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t(0)));
    for (int d = 0; d < p; ++d)
      for (std::size_t k = 0; k < send_counts[d]; ++k) in.push_back(float(r * 100 + d * 10 + k + 1));
    show(comm, with_algo(comm, Collective::all_to_allv, "all_to_allv (rank r sends rank d (r+d) mod 3)"), in, out,
         [&] {
           collective(comm, o,
                      {Collective::all_to_allv, view_of(in), view_of(out), op, 0, send_counts, recv_counts});
         });
  } else if (name == "send_recv") {
    // A ring shift: every rank sends to its right neighbour and receives from its left.
    Values in = make(2, [&](std::size_t i) { return float(r * 10 + i + 1); }), out(2);
    show(comm, fmt::format("send_recv on {} ranks (rank r sends to r+1)", p), in, out, [&] {
      if (p > 1) comm.sendrecv(view_of(in), (r + 1) % p, view_of(out), (r - 1 + p) % p);
    });
  } else if (name == "barrier") {
    // Rank r computes for r microseconds, then all wait: the buffers are the clocks.
    const double t0 = comm.now();
    comm.compute_for("work", r * 1e-6);
    std::vector<float> before = {float((comm.now() - t0) * 1e6)}, after(1);
    show(comm, with_algo(comm, Collective::barrier, "barrier") + " (buffer: clock in us)", before, after, [&] {
      collective(comm, o, {Collective::barrier, {}, {}, op, 0});
      after[0] = float((comm.now() - t0) * 1e6);
    });
  } else if (name == "deadlock") {
    // The classic mistake: every rank receives from its left before sending right.
    // Nobody ever sends, and the simulator says so instead of hanging.
    Values in(2), out = make(2, [&](std::size_t i) { return float(r * 10 + i + 1); });
    comm.recv(view_of(in), (r - 1 + p) % p);
    comm.send(view_of(out), (r + 1) % p);
  } else {
    throw labkit::Error(fmt::format("rank {}: collectives: unknown --op '{}'", r, name));
  }
}

// The identities the reading states, checked element by element on every rank.
bool check_identities(Comm& comm, nlohmann::json& report) {
  const int p = comm.size(), r = comm.rank();
  const std::size_t n = 2 * p;  // divisible by P, as reduce_scatter needs
  Values x = make(n, [&](std::size_t i) { return float((r + 1) * 100 + i); });
  Values block = make(2, [&](std::size_t i) { return float(r * 10 + i + 1); });

  Values all_reduce = x;
  comm.all_reduce(view_of(all_reduce), ReduceOp::sum);
  Values shard(n / p), rs_ag(n);
  comm.reduce_scatter(view_of(x), view_of(shard), ReduceOp::sum);
  comm.all_gather(view_of(shard), view_of(rs_ag));
  Values reduce_bcast = x;
  comm.reduce(view_of(reduce_bcast), ReduceOp::sum, 0);
  comm.broadcast(view_of(reduce_bcast), 0);
  Values all_gather(2 * p), gather_bcast(2 * p);
  comm.all_gather(view_of(block), view_of(all_gather));
  comm.gather(view_of(block), view_of(gather_bcast), 0);
  comm.broadcast(view_of(gather_bcast), 0);

  std::vector<double> holds = {double(all_reduce == rs_ag), double(all_reduce == reduce_bcast),
                               double(all_gather == gather_bcast)};
  const auto every_rank = comm.inspect(view_of(holds));
  bool all_hold = true;
  if (r == 0) {
    const char* names[] = {"all_reduce == reduce_scatter + all_gather", "all_reduce == reduce + broadcast",
                           "all_gather == gather + broadcast"};
    fmt::print("identities ({} elements per rank, compared on every rank):\n", n);
    for (int k = 0; k < 3; ++k) {
      std::vector<int> failing;
      for (int q = 0; q < p; ++q) if (every_rank[q][k] == 0) failing.push_back(q);
      all_hold = all_hold && failing.empty();
      fmt::print("  {:<44}{}\n", names[k], failing.empty() ? "holds" : fmt::format("FAILS on ranks {}", fmt::join(failing, ", ")));
      report.push_back({{"identity", names[k]}, {"holds", failing.empty()}, {"failing_ranks", failing}});
    }
  }
  return all_hold && holds == std::vector<double>{1, 1, 1};
}

// The ranks as a mesh: rank 0 prints the map, after every rank has checked
// that an all_reduce in each of its groups sums exactly the ranks the map lists
// (the groups are what split built on this backend).
void show_mesh(Comm& world, const std::vector<MeshDim>& dims, nlohmann::json& report, const std::string& plot) {
  const Mesh mesh(world, dims);
  for (const MeshDim& d : dims) {
    const std::vector<int> ranks = mesh.group_ranks(d.name, world.rank());
    std::vector<std::int32_t> sum = {world.rank()};
    mesh.group(d.name).all_reduce(view_of(sum), ReduceOp::sum);
    if (sum[0] != std::accumulate(ranks.begin(), ranks.end(), 0))
      throw labkit::Error(fmt::format("rank {}: mesh: its {} group [{}] summed to {}", world.rank(), d.name,
                                      fmt::join(ranks, " "), sum[0]));
  }
  if (world.rank() != 0) return;
  fmt::print("{}checked: an all_reduce in each group sums exactly its ranks, on every rank\n", mesh_table(mesh));
  report = mesh_json(mesh);
  if (!plot.empty()) plot_mesh(mesh, plot);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> all = {"broadcast", "reduce", "all_reduce", "gather", "scatter",
                                        "all_gather", "reduce_scatter", "all_to_all", "all_to_allv", "send_recv",
                                        "barrier"};
  std::vector<std::string> ops = all;
  ops.insert(ops.end(), {"all", "deadlock"});
  CLI::App app{"Lab 1: what each collective does, rank by rank"};
  cli::one_line_errors(app);
  Options o;
  RunOptions run_options;
  app.add_option("--op", o.op, "broadcast, reduce, all_reduce, gather, scatter, all_gather, reduce_scatter, "
                               "all_to_all, all_to_allv, send_recv, barrier, all, or deadlock (a classic mistake)")
      ->capture_default_str()->check(cli::one_of("operation", ops));
  app.add_option("--root", o.root, "root rank for broadcast, reduce, gather, scatter")
      ->capture_default_str()->check(cli::at_least(0));
  app.add_option("--reduce-op", o.reduce_op, "sum, prod, min, max, avg")
      ->capture_default_str()->check(cli::parsed_by(parse_reduce_op));
  app.add_flag("--nonblocking", o.nonblocking,
               "start each collective on the rank's communication stream (i_all_reduce, ...) and wait for it");
  app.add_option_function<std::string>(
         "--compute", [&o](const std::string& t) { o.compute = parse_seconds(t); },
         "every rank computes this long (10us, 1ms) beside each collective: after it, or while it is in flight "
         "(--nonblocking)")
      ->check(cli::parsed_by([](const std::string& t) { parse_seconds(t); }));
  std::string json_path, mesh, plot;
  app.add_option("--json", json_path, "also write what is printed as JSON to this file")->check(cli::output_file());
  app.add_option("--mesh", mesh, "lay the ranks out as a device mesh, e.g. pp=2,dp=2,tp=2 (the last dimension "
                                 "varies fastest), and print each rank's coordinates instead of running --op")
      ->check(cli::parsed_by(parse_mesh_dims));
  app.add_option("--plot", plot, "--mesh: draw the ranks by node to this SVG or PNG (gnuplot)")
      ->check(cli::figure_file());
  add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);
  bool identities_hold = true;
  nlohmann::json report = nlohmann::json::array();  // what rank 0 printed, for --json
  try {
    if (!plot.empty() && mesh.empty()) throw Error(fmt::format("--plot {}: draws --mesh (add it)", plot));
    std::vector<MeshDim> mesh_dims;
    if (!mesh.empty()) {
      mesh_dims = parse_mesh_dims(mesh);
      int product = 1;  // at most 2^20 (parse_mesh_dims)
      for (const MeshDim& d : mesh_dims) product *= d.size;
      if (!run_options.ranks_given) run_options.ranks = product;  // under mpirun, -np decides
    }
    run(run_options, [&](Comm& comm) {
      if (!mesh_dims.empty()) return show_mesh(comm, mesh_dims, report, plot);
      if (comm.rank() == 0 && o.compute > 0)
        fmt::print("every rank computes for {} beside each collective, {}\n\n", format_seconds(o.compute),
                   o.nonblocking ? "while it is in flight" : "after it");
      if (o.op != "all") return demo(comm, o.op, o, report);
      for (const std::string& name : all) demo(comm, name, o, report);
      if (!check_identities(comm, report)) identities_hold = false;
    });
    if (!json_path.empty()) create_file(json_path) << report.dump(2) << '\n';
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return identities_hold ? 0 : 1;
}

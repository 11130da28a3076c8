// Each collective on small buffers whose values say where they came from, run
// on every rank; rank 0 prints every rank's buffer before and after. The inputs
// are those of the NCCL User Guide's "Collective Operations" figures
// (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/collectives.html).
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "collectives_lab.h"
#include "labkit/algorithms.h"
#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/units.h"

namespace collectives_lab {

using namespace labkit;

namespace {

using Values = std::vector<float>;

Values make(std::size_t n, const std::function<float(std::size_t)>& f) {
  Values v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = f(i);
  return v;
}

// Every rank's buffers, as rank 0 prints them: before, an arrow, after.
void print_buffers(const std::vector<Values>& before, const std::vector<Values>& after) {
  std::vector<std::string> left;
  std::size_t width = 6;
  for (const auto& row : before)
    width = std::max(width, left.emplace_back(fmt::format("[{:g}]", fmt::join(row, " "))).size());
  fmt::print("          {:<{}}     after\n", "before", width);
  for (std::size_t r = 0; r < before.size(); ++r)
    fmt::print("rank {:<3}  {:<{}}  ->  [{:g}]\n", r, left[r], width, fmt::join(after[r], " "));
  fmt::print("\n");
}

// One operation on this rank: what it was asked for, and where rank 0 reports.
struct Demo {
  Comm& comm;
  const Options& o;
  nlohmann::json& report;
  const int p = comm.size(), r = comm.rank();
  const ReduceOp op = parse_reduce_op(o.reduce_op);
  const std::string reduce_args = "op=" + o.reduce_op;

  std::string titled(Collective c, const std::string& what) const {
    return fmt::format("{} on {} ranks, algo {}", what, p, comm.algorithm(c));
  }

  // The collective as asked: blocking, then --compute's work; or (--nonblocking)
  // started on the rank's communication stream, the work done while it is in
  // flight, then waited for. The buffers come out the same; the time is the sum
  // of the two, or the longer of them.
  void collective(const CollectiveCall& call) const {
    if (!o.nonblocking) {
      comm.run(call);
      if (o.compute > 0) comm.compute_seconds("compute", o.compute);
      return;
    }
    Request in_flight = comm.start(call);
    if (o.compute > 0) comm.compute_seconds("compute", o.compute);
    in_flight.wait();
  }

  // Runs `call` on every rank; rank 0 prints its time (first start to last end)
  // and every rank's `in` before and `out` after, and reports them.
  void show(const std::string& title, Values& in, Values& out, const std::function<void()>& call) const {
    // Instruments (untraced, free of virtual time): every rank's buffers and clock on rank 0.
    const std::vector<Values> before = comm.gather_objects(in);
    struct Clock {
      double start, end;
    } clock{comm.now(), 0};
    call();
    clock.end = comm.now();
    const std::vector<Values> after = comm.gather_objects(out);
    const std::vector<Clock> clocks = comm.gather_object(clock);
    if (r != 0) return;
    double start = clocks[0].start, end = 0;
    for (const Clock& c : clocks) start = std::min(start, c.start), end = std::max(end, c.end);
    fmt::print("{}: {}\n", title, format_seconds(end - start));
    report.push_back({{"title", title}, {"seconds", end - start}, {"before", before}, {"after", after}});
    print_buffers(before, after);
  }

  // An operation that reads and writes one buffer in place.
  void show_in_place(Collective c, const std::string& what, Values& buf, int root) const {
    show(titled(c, what), buf, buf, [&] { collective({c, {}, view_of(buf), op, root}); });
  }
  // An operation from `in` to `out`.
  void show_out_of_place(Collective c, const std::string& what, Values& in, Values& out, int root) const {
    show(titled(c, what), in, out, [&] { collective({c, view_of(in), view_of(out), op, root}); });
  }
};

void broadcast(const Demo& d) {
  Values buf = make(3, [&](std::size_t i) { return d.r == d.o.root ? 10.0f * (i + 1) : 0.0f; });
  d.show_in_place(Collective::broadcast, fmt::format("broadcast(root={})", d.o.root), buf, d.o.root);
}

void reduce(const Demo& d) {
  Values buf = make(3, [&](std::size_t i) { return float(d.r + 1 + i); });
  d.show_in_place(Collective::reduce, fmt::format("reduce({}, root={})", d.reduce_args, d.o.root), buf, d.o.root);
}

void all_reduce(const Demo& d) {
  Values buf = make(3, [&](std::size_t i) { return float(d.r + 1 + i); });
  d.show_in_place(Collective::all_reduce, "all_reduce(" + d.reduce_args + ")", buf, 0);
}

void gather(const Demo& d) {
  Values in = make(2, [&](std::size_t i) { return float(d.r * 10 + i + 1); }), out(d.r == d.o.root ? 2 * d.p : 0);
  d.show_out_of_place(Collective::gather, fmt::format("gather(root={})", d.o.root), in, out, d.o.root);
}

void scatter(const Demo& d) {
  Values in = d.r == d.o.root ? make(2 * d.p, [](std::size_t i) { return float(i / 2 * 10 + i % 2 + 1); }) : Values{};
  Values out(2);
  d.show_out_of_place(Collective::scatter, fmt::format("scatter(root={})", d.o.root), in, out, d.o.root);
}

void all_gather(const Demo& d) {
  Values in = make(2, [&](std::size_t i) { return float(d.r * 10 + i + 1); }), out(2 * d.p);
  d.show_out_of_place(Collective::all_gather, "all_gather", in, out, 0);
}

void reduce_scatter(const Demo& d) {
  // Rank r contributes [r*10+i, r*10+i+1] for each block i.
  Values in = make(2 * d.p, [&](std::size_t i) { return float(d.r * 10 + i / 2 + i % 2); }), out(2);
  d.show_out_of_place(Collective::reduce_scatter, "reduce_scatter(" + d.reduce_args + ")", in, out, 0);
}

void all_to_all(const Demo& d) {
  // Block j of rank r is [r*100 + j*10 + 1, +2]: the digits say who sent it to whom.
  Values in = make(2 * d.p, [&](std::size_t i) { return float(d.r * 100 + i / 2 * 10 + i % 2 + 1); }), out(2 * d.p);
  d.show_out_of_place(Collective::all_to_all, "all_to_all", in, out, 0);
}

// Blocks of any size, as an MoE layer dispatches tokens: rank r sends (r + d) % 3
// elements to rank d, [r*100 + d*10 + 1, ...]. The receivers learn their counts
// from one small all_to_all first (exchange_counts).
void all_to_allv(const Demo& d) {
  std::vector<std::size_t> send_counts(d.p);
  for (int to = 0; to < d.p; ++to) send_counts[to] = std::size_t(d.r + to) % 3;
  const std::vector<std::size_t> recv_counts = d.comm.exchange_counts(send_counts);
  Values in, out(std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t(0)));
  for (int to = 0; to < d.p; ++to)
    for (std::size_t k = 0; k < send_counts[to]; ++k) in.push_back(float(d.r * 100 + to * 10 + k + 1));
  d.show(d.titled(Collective::all_to_allv, "all_to_allv (rank r sends rank d (r+d) mod 3)"), in, out, [&] {
    d.collective({Collective::all_to_allv, view_of(in), view_of(out), d.op, 0, send_counts, recv_counts});
  });
}

// A ring shift: every rank sends to its right neighbour and receives from its left.
void send_recv(const Demo& d) {
  if (d.p == 1) return;  // --op all on one rank: no neighbour (--op send_recv is refused there)
  Values in = make(2, [&](std::size_t i) { return float(d.r * 10 + i + 1); }), out(2);
  d.show(fmt::format("send_recv on {} ranks (rank r sends to r+1)", d.p), in, out, [&] {
    d.comm.sendrecv(view_of(in), (d.r + 1) % d.p, view_of(out), (d.r - 1 + d.p) % d.p);
  });
}

// Rank r computes for r microseconds, then all wait: the buffers are the clocks.
void barrier(const Demo& d) {
  const double t0 = d.comm.now();
  d.comm.compute_seconds("work", d.r * 1e-6);
  Values before = {float((d.comm.now() - t0) * 1e6)}, after(1);
  d.show(d.titled(Collective::barrier, "barrier") + " (buffer: clock in us)", before, after, [&] {
    d.collective({Collective::barrier, {}, {}, d.op, 0});
    after[0] = float((d.comm.now() - t0) * 1e6);
  });
}

// The classic mistake: every rank receives from its left before sending right.
// Nobody ever sends, and the simulator says so instead of hanging.
void deadlock(const Demo& d) {
  Values in(2), out = make(2, [&](std::size_t i) { return float(d.r * 10 + i + 1); });
  d.comm.recv(view_of(in), (d.r - 1 + d.p) % d.p);
  d.comm.send(view_of(out), (d.r + 1) % d.p);
}

const std::map<std::string, void (*)(const Demo&)>& operations() {
  static const std::map<std::string, void (*)(const Demo&)> by_name = {
      {"broadcast", broadcast},   {"reduce", reduce},         {"all_reduce", all_reduce},
      {"gather", gather},         {"scatter", scatter},       {"all_gather", all_gather},
      {"reduce_scatter", reduce_scatter},                     {"all_to_all", all_to_all},
      {"all_to_allv", all_to_allv},                           {"send_recv", send_recv},
      {"barrier", barrier},       {"deadlock", deadlock}};
  return by_name;
}

}  // namespace

void add_operation_options(CLI::App& app, Options& o) {
  std::vector<std::string> ops = every_operation();
  ops.insert(ops.end(), {"all", "deadlock"});
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
}

void refuse_unused_options(const CLI::App& app, const Options& o, const std::vector<std::string>& algos) {
  const auto refuse = [&](const std::string& option, const std::string& value, const std::vector<std::string>& users,
                          std::string_view lacks) {
    if (app.count(option) && o.op != "all" && std::find(users.begin(), users.end(), o.op) == users.end())
      throw Error(fmt::format("{}{}: --op {} {} (only {} take it)", option, value.empty() ? "" : " " + value, o.op,
                              lacks, fmt::join(users, ", ")));
  };
  refuse("--root", std::to_string(o.root), {"broadcast", "reduce", "gather", "scatter"}, "has no root");
  refuse("--reduce-op", o.reduce_op, {"reduce", "all_reduce", "reduce_scatter"}, "reduces nothing");
  std::vector<std::string> collectives = every_operation();
  std::erase(collectives, "send_recv");
  refuse("--compute", format_seconds(o.compute), collectives,
         "is point-to-point, and the compute runs beside a collective");
  refuse("--nonblocking", "", collectives, "is point-to-point, and it starts a collective");
  // --algo NAME picks NAME for every collective that has one so named (run.h);
  // COLLECTIVE=NAME is checked where it is parsed.
  for (const std::string& name : algos) {
    if (o.op == "all" || name == "native" || name.find('=') != std::string::npos) continue;
    if (o.op == "send_recv" || o.op == "deadlock")
      throw Error(fmt::format("--algo {}: --op {} is point-to-point; --algo chooses how collectives run", name, o.op));
    const Collective c = parse_collective(o.op);
    if (!find_algorithm(c, name))
      throw Error(fmt::format("--algo {}: --op {} has no {} algorithm ({})", name, o.op, name, algorithm_names(c)));
  }
}

const std::vector<std::string>& every_operation() {
  static const std::vector<std::string> names = {"broadcast",  "reduce",         "all_reduce", "gather",
                                                 "scatter",    "all_gather",     "reduce_scatter",
                                                 "all_to_all", "all_to_allv",    "send_recv",  "barrier"};
  return names;
}

void show_operation(Comm& comm, const std::string& name, const Options& o, nlohmann::json& report) {
  const auto found = operations().find(name);
  if (found == operations().end())
    throw Error(fmt::format("rank {}: collectives: unknown --op '{}'", comm.rank(), name));
  found->second(Demo{.comm = comm, .o = o, .report = report});
}

}  // namespace collectives_lab

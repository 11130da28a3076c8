// The simulator's network checked against SimGrid (./labkit simgrid): the same
// algorithms, timed by labkit's simulator (fair sharing, the default, and the
// serial model beside it) and by SimGrid's SMPI running them as a plain MPI
// program (smpi_collective.cpp) on the platform that stands for the topology.
//
// The platform translation: every rank is an SMPI host. A labkit port is a
// SimGrid link (one direction each, so SHARED links, not SPLITDUPLEX): rank r's
// device port out and in (the intra-node link's bandwidth), each node's NIC out
// and in (the inter-node link's). The route from a to b is two links, a's out
// port and b's in port, as the simulator routes it; the link's alpha is split
// evenly between them, so a route's latency is alpha. SimGrid's own corrections
// are turned off, leaving the pure max-min model: CM02 (no latency or bandwidth
// factors), TCP-gamma 0 (no window bound), no cross-traffic (an acknowledgement
// flow back along each route), sends that complete on delivery
// (send-is-detached-thresh 0, labkit's rendezvous), and no compute charged.
//
//   ./labkit simgrid [--ranks 8 16] [--topology dgx-h100 pcie ethernet] [-b 64K -e 16M -f 16]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/algorithms.h"
#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/output.h"
#include "labkit/units.h"
#include "sim/engine.h"

using namespace labkit;
namespace fs = std::filesystem;

namespace {

// One algorithm (Timed), as labkit's simulator runs it: buffers of `bytes` (f32),
// payload-free (only sizes move; SMPI's run computes nothing either).
struct Timed {
  std::string name;
  bool needs_power_of_two;
  std::function<void(Comm&, std::size_t count)> run;
};

const std::vector<Timed>& algorithms() {
  static const std::vector<Timed> all = {
      {"ring", false, [](Comm& c, std::size_t n) { ring_all_reduce(c, {nullptr, n, DType::f32}, ReduceOp::sum); }},
      {"recursive_halving_doubling", true,
       [](Comm& c, std::size_t n) { recursive_halving_doubling_all_reduce(c, {nullptr, n, DType::f32}, ReduceOp::sum); }},
      {"naive", false, [](Comm& c, std::size_t n) { naive_all_reduce(c, {nullptr, n, DType::f32}, ReduceOp::sum); }},
      {"pairwise", false,
       [](Comm& c, std::size_t n) { pairwise_all_to_all(c, {nullptr, n, DType::f32}, {nullptr, n, DType::f32}); }},
  };
  return all;
}

double simulate(const Timed& algorithm, const Topology& topology, int ranks, std::size_t bytes,
                sim::Network network) {
  sim::Engine engine({.ranks = ranks, .topology = topology, .payload = false, .network = network});
  engine.run([&](Comm& c) { algorithm.run(c, bytes / sizeof(float)); });
  return engine.elapsed();
}

// The SimGrid platform for `ranks` ranks of `t`, with a hostfile beside it.
void write_platform(const Topology& t, int ranks, const fs::path& xml, const fs::path& hostfile) {
  std::ofstream out = create_file(xml.string());
  out << "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
         "<platform version=\"4.1\">\n<zone id=\"labkit\" routing=\"Full\">\n";
  const auto link = [&](const std::string& id, const Link& l) {
    out << fmt::format("  <link id=\"{}\" bandwidth=\"{:.17g}Bps\" latency=\"{:.17g}s\"/>\n", id, l.bandwidth,
                       l.alpha / 2);
  };
  for (int r = 0; r < ranks; ++r) out << fmt::format("  <host id=\"r{}\" speed=\"1Gf\"/>\n", r);
  for (int r = 0; r < ranks; ++r) {
    link(fmt::format("r{}_out", r), t.intra);
    link(fmt::format("r{}_in", r), t.intra);
  }
  const int nodes = (ranks + t.devices_per_node - 1) / t.devices_per_node;
  for (int n = 0; n < nodes; ++n)
    for (int k = 0; k < t.nics_per_node; ++k) {
      link(fmt::format("n{}_nic{}_out", n, k), t.inter);
      link(fmt::format("n{}_nic{}_in", n, k), t.inter);
    }
  for (int a = 0; a < ranks; ++a)
    for (int b = 0; b < ranks; ++b) {
      if (a == b) continue;
      const bool same_node = t.node_of(a) == t.node_of(b);
      const std::string from = same_node ? fmt::format("r{}_out", a) : fmt::format("n{}_nic{}_out", t.node_of(a), t.nic_of(a));
      const std::string to = same_node ? fmt::format("r{}_in", b) : fmt::format("n{}_nic{}_in", t.node_of(b), t.nic_of(b));
      out << fmt::format("  <route src=\"r{}\" dst=\"r{}\" symmetrical=\"NO\"><link_ctn id=\"{}\"/><link_ctn id=\"{}\"/></route>\n",
                         a, b, from, to);
    }
  out << "</zone>\n</platform>\n";
  std::ofstream hosts = create_file(hostfile.string());
  for (int r = 0; r < ranks; ++r) hosts << "r" << r << "\n";
}

// What SMPI says the algorithm takes, in seconds.
double smpi_time(const std::string& program, const std::string& algorithm, int ranks, std::size_t bytes,
                 const fs::path& xml, const fs::path& hostfile) {
  const std::string command = fmt::format(
      "smpirun -np {} -platform {} -hostfile {} --cfg=network/model:CM02 --cfg=network/TCP-gamma:0 "
      "--cfg=network/crosstraffic:0 --cfg=smpi/send-is-detached-thresh:0 --cfg=smpi/simulate-computation:no "
      "--log=root.thresh:error {} {} {} 2>&1",
      ranks, xml.string(), hostfile.string(), program, algorithm, bytes);
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw Error(fmt::format("simgrid: cannot run {}", command));
  std::string output;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe)) output += line;
  const int status = pclose(pipe);
  double seconds = 0;
  const std::size_t last_line = output.find_last_of('\n', output.size() >= 2 ? output.size() - 2 : 0);
  const std::string tail = output.substr(last_line == std::string::npos ? 0 : last_line + 1);
  if (status != 0 || std::sscanf(tail.c_str(), "%lf", &seconds) != 1)
    throw Error(fmt::format("simgrid: {} exited {} and printed:\n{}", command, WEXITSTATUS(status), output));
  return seconds;
}

struct Row {
  std::string algorithm, topology;
  int ranks;
  std::size_t bytes;
  double smpi, fair, serial;
};

double error_of(double labkit, double smpi) { return (labkit - smpi) / smpi; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time labkit's algorithms on the simulator and under SimGrid's SMPI, on the same platform"};
  std::vector<int> rank_counts = {8, 16};
  std::vector<std::string> topologies = {"dgx-h100", "pcie", "ethernet"};
  std::vector<std::string> names;
  for (const Timed& a : algorithms()) names.push_back(a.name);
  std::vector<std::string> chosen = names;
  std::string min_bytes = "64K", max_bytes = "16M";  // as given (parse_bytes: 64K, 1M, 1G)
  int factor = 16;
  double tolerance = 0.01;
  std::string json, program = LABKIT_SMPI_COLLECTIVE;
  app.add_option("--ranks", rank_counts, "rank counts")->capture_default_str()->check(cli::in_range(2, 256));
  app.add_option("--topology", topologies, "labkit topologies (presets or JSON files)")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& t) { find_topology(t); }));
  app.add_option("--algos", chosen, "algorithms")->capture_default_str()->check(cli::one_of("algorithm", names));
  app.add_option("-b,--minbytes", min_bytes, "smallest buffer per rank")->capture_default_str()->check(cli::byte_size(1024));
  app.add_option("-e,--maxbytes", max_bytes, "largest buffer per rank")->capture_default_str()->check(cli::byte_size(1024));
  app.add_option("-f,--stepfactor", factor, "size multiplier")->capture_default_str()->check(cli::in_range(2, 1 << 20));
  app.add_option("--tolerance", tolerance, "largest |fair - smpi| / smpi that passes")
      ->capture_default_str()->check(cli::above(0.0, 1.0));
  app.add_option("--json", json, "write the rows as JSON to this file")->check(cli::output_file());
  app.add_option("--smpi-program", program, "the MPI program SMPI runs")->capture_default_str();
  cli::one_line_errors(app);
  CLI11_PARSE(app, argc, argv);

  try {
    const std::uint64_t smallest = parse_bytes(min_bytes), largest = parse_bytes(max_bytes);
    if (smallest > largest) throw Error(fmt::format("--minbytes {} is larger than --maxbytes {}", min_bytes, max_bytes));
    // The platforms smpirun reads, removed however the run ends.
    struct Scratch {
      fs::path dir = fs::temp_directory_path() / fmt::format("labkit-simgrid-{}", getpid());
      ~Scratch() {
        std::error_code ignored;
        fs::remove_all(dir, ignored);
      }
    } scratch;
    const fs::path& dir = scratch.dir;
    fs::create_directories(dir);
    std::vector<Row> rows;
    for (const std::string& topology_name : topologies) {
      const Topology topology = find_topology(topology_name);
      for (const int ranks : rank_counts) {
        const fs::path xml = dir / fmt::format("{}-{}.xml", topology.name, ranks), hosts = dir / fmt::format("{}-{}.hosts", topology.name, ranks);
        write_platform(topology, ranks, xml, hosts);
        for (const Timed& algorithm : algorithms()) {
          if (std::find(chosen.begin(), chosen.end(), algorithm.name) == chosen.end()) continue;
          if (algorithm.needs_power_of_two && (ranks & (ranks - 1)) != 0) continue;
          for (std::uint64_t bytes = smallest; bytes <= largest; bytes *= factor) {
            // Every chunk whole: a multiple of 4 bytes times the rank count.
            const std::size_t size = bytes / (4 * ranks) * (4 * ranks);
            progress_line(fmt::format("  {}, {} ranks, {}, {}", topology.name, ranks, algorithm.name,
                                      format_bytes(size)));
            rows.push_back({algorithm.name, topology.name, ranks, size,
                            smpi_time(program, algorithm.name, ranks, size, xml, hosts),
                            simulate(algorithm, topology, ranks, size, sim::Network::fair),
                            simulate(algorithm, topology, ranks, size, sim::Network::serial)});
          }
        }
      }
    }
    progress_line("");
    if (rows.empty())
      throw Error("--algos: none of them runs on the rank counts given (recursive halving-doubling needs a power of "
                  "two): nothing to compare");

    fmt::print("# labkit's simulator against SimGrid SMPI 3.32 (CM02, no TCP gamma, no cross-traffic, rendezvous sends)\n");
    fmt::print("# error: (labkit - smpi) / smpi; fair sharing is the simulator's default, serial its older model\n");
    fmt::print("#{:>27} {:>9} {:>6} {:>10} {:>12} {:>12} {:>8} {:>12} {:>8}\n", "algorithm", "topology", "ranks",
               "size", "smpi (us)", "fair (us)", "error", "serial (us)", "error");
    double worst = 0;
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows) {
      const double fair_error = error_of(r.fair, r.smpi), serial_error = error_of(r.serial, r.smpi);
      worst = std::max(worst, std::abs(fair_error));
      fmt::print(" {:>27} {:>9} {:>6} {:>10} {:>12.2f} {:>12.2f} {:>7.2f}% {:>12.2f} {:>7.2f}%\n", r.algorithm,
                 r.topology, r.ranks, r.bytes, r.smpi * 1e6, r.fair * 1e6, fair_error * 100, r.serial * 1e6,
                 serial_error * 100);
      out.push_back({{"algorithm", r.algorithm}, {"topology", r.topology}, {"ranks", r.ranks}, {"bytes", r.bytes},
                     {"smpi_us", r.smpi * 1e6}, {"fair_us", r.fair * 1e6}, {"fair_error", fair_error},
                     {"serial_us", r.serial * 1e6}, {"serial_error", serial_error}});
    }
    fmt::print("# largest fair-sharing error: {:.3f}% (tolerance {:.1f}%)\n", worst * 100, tolerance * 100);
    if (!json.empty()) create_file(json) << out.dump(2) << '\n';
    return worst <= tolerance ? 0 : 1;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}

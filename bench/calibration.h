// The calibration's fit: the alpha-beta link that explains measured allreduce
// times best, and the topology JSON that hands it to the simulator.
//
// Per algorithm, its cost model (cost_model.h) is linear in the link,
// T = alpha * A + beta * B, where A counts the latency terms (messages on the
// critical path) and B the bytes terms, both read off the model itself by
// pricing it once on a link of pure latency and once on one of pure bandwidth.
// Least squares on the relative error, as the classic two regimes: alpha (and a
// first beta) from the small messages, where latency dominates; then beta again,
// alpha held, from the large messages, where bandwidth does.
//
// Apart from the measuring (bench/calibrate.cpp), so a test can feed it timings
// made from a known link and see that link come back.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "labkit/topology.h"

namespace labkit::bench {

struct Sample {
  std::string algo;
  std::size_t bytes;
  double seconds;
  double latency_terms, byte_terms;  // T = alpha * latency_terms + beta * byte_terms
};
// A time measured for `algo` at `bytes` on `ranks` ranks, with its model's terms.
Sample sample_of(const std::string& algo, std::size_t bytes, int ranks, double seconds);

// The link of one algorithm's samples: alpha from those up to latency_below
// bytes, beta from those from bandwidth_above on.
Link fit(const std::vector<Sample>& samples, std::size_t latency_below, std::size_t bandwidth_above);
double predicted(const Sample& sample, const Link& link);  // what the fitted model says it takes

// One node of `ranks` devices, every link the fitted one: what the topology JSON describes.
Topology single_node(int ranks, Link link);
// The topology JSON that `--backend sim --topology FILE` reads, with the samples and their fit as "calibration".
nlohmann::json topology_json(const std::string& name, int ranks, const Link& link, const nlohmann::json& rows);

}  // namespace labkit::bench

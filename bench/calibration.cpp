#include "calibration.h"

#include <algorithm>
#include <cmath>

#include "labkit/cost_model.h"
#include "labkit/error.h"

namespace labkit::bench {

Topology single_node(int ranks, Link link) {
  return {.name = "calibration", .devices_per_node = ranks, .nics_per_node = 1, .intra = link, .inter = link,
          .device = device_preset("h100")};
}

// The model's latency and bytes terms: price it on a link of pure latency, then pure bandwidth.
Sample sample_of(const std::string& algo, std::size_t bytes, int ranks, double seconds) {
  const double latency = predict(Collective::all_reduce, algo, bytes, ranks, single_node(ranks, {1.0, 1e300}));
  const double per_byte = predict(Collective::all_reduce, algo, bytes, ranks, single_node(ranks, {0.0, 1.0}));
  return {algo, bytes, seconds, latency, per_byte};
}

// Minimizes sum ((alpha A + beta B - T) / T)^2 over the small messages (2x2
// normal equations, alpha kept >= 0), then over the large ones for beta alone.
Link fit(const std::vector<Sample>& samples, std::size_t latency_below, std::size_t bandwidth_above) {
  double aa = 0, ab = 0, bb = 0, at = 0, bt = 0;
  for (const Sample& s : samples) {
    if (s.bytes > latency_below) continue;
    const double a = s.latency_terms / s.seconds, b = s.byte_terms / s.seconds;
    aa += a * a;
    ab += a * b;
    bb += b * b;
    at += a;
    bt += b;
  }
  const double det = aa * bb - ab * ab;
  if (std::abs(det) < 1e-30) throw Error("calibrate: too few small messages to fit alpha (lower -b)");
  const double alpha = std::max(0.0, (at * bb - bt * ab) / det);
  double num = 0, den = 0;
  for (const Sample& s : samples) {
    if (s.bytes < bandwidth_above) continue;
    const double a = s.latency_terms / s.seconds, b = s.byte_terms / s.seconds;
    num += b * (1 - alpha * a);
    den += b * b;
  }
  if (den == 0 || num <= 0) throw Error("calibrate: too few large messages to fit beta (raise -e)");
  return {alpha, den / num};
}

double predicted(const Sample& s, const Link& link) {
  return link.alpha * s.latency_terms + s.byte_terms / link.bandwidth;
}

nlohmann::json topology_json(const std::string& name, int ranks, const Link& link, const nlohmann::json& rows) {
  const nlohmann::json link_json = {{"alpha_us", link.alpha * 1e6}, {"bandwidth_GBps", link.bandwidth / 1e9}};
  return {{"name", name},          {"devices_per_node", ranks}, {"nics_per_node", 1},
          {"intra", link_json},    {"inter", link_json},        {"calibration", rows}};
}

}  // namespace labkit::bench

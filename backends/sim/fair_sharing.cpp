#include "fair_sharing.h"

#include <algorithm>
#include <functional>
#include <queue>

namespace labkit::sim {

const std::vector<FairSharing::Rate>& FairSharing::solve(std::span<const SharedPort> ports,
                                                         std::span<const int> touched) {
  rates_.clear();
  if (touched.empty()) return rates_;
  ++solves_;
  ports_.resize(ports.size());
  reach_linked(ports, touched);
  fill_progressively(ports);
  return rates_;
}

// The ports and flows a change at the touched ports can reach: breadth first,
// each flow's other port joins the ports to visit.
void FairSharing::reach_linked(std::span<const SharedPort> ports, std::span<const int> touched) {
  reached_ports_.clear();
  const auto reach = [&](int p) {
    if (ports_[p].reached_in == solves_) return;
    ports_[p].reached_in = solves_;
    reached_ports_.push_back(p);
  };
  for (const int p : touched) reach(p);
  for (std::size_t i = 0; i < reached_ports_.size(); ++i) {
    for (const SharedPort::Flow& flow : ports[reached_ports_[i]].flows) {
      if (std::size_t(flow.id) >= flows_.size()) flows_.resize(std::size_t(flow.id) + 1);
      FlowMark& mark = flows_[flow.id];
      if (mark.reached_in == solves_) continue;
      mark.reached_in = solves_;
      mark.answer = rates_.size();
      rates_.push_back({flow.id, 0});
      reach(flow.other_port);
    }
  }
}

// Progressive filling over the reached ports: the smallest even share first.
void FairSharing::fill_progressively(std::span<const SharedPort> ports) {
  // (share, port): ties to the lower port; an entry whose port's share has
  // changed since it was pushed is skipped.
  using Entry = std::pair<double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> bottlenecks;
  for (const int p : reached_ports_) {
    PortLeft& left = ports_[p];
    left.bandwidth = ports[p].bandwidth;
    left.flows = int(ports[p].flows.size());
    if (left.flows > 0) bottlenecks.push({left.bandwidth / left.flows, p});
  }
  while (!bottlenecks.empty()) {
    const auto [share, p] = bottlenecks.top();
    bottlenecks.pop();
    PortLeft& port = ports_[p];
    if (port.flows == 0 || share != port.bandwidth / port.flows) continue;
    for (const SharedPort::Flow& flow : ports[p].flows) {
      FlowMark& mark = flows_[flow.id];
      if (mark.rated_in == solves_) continue;
      mark.rated_in = solves_;
      rates_[mark.answer].bytes_per_second = share;
      PortLeft& other = ports_[flow.other_port];
      other.bandwidth = std::max(0.0, other.bandwidth - share);
      if (--other.flows > 0) bottlenecks.push({other.bandwidth / other.flows, flow.other_port});
    }
    port.flows = 0;
  }
}

}  // namespace labkit::sim

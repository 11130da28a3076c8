// Max-min fair sharing of the simulated network's ports (the engine's
// Network::fair; SimGrid keeps its own max-min solver apart the same way, in
// src/kernel/lmm/maxmin.cpp).
//
// A port has a bandwidth; a flow moves a message's bytes through two ports,
// its sender's out and its receiver's in. The rates are max-min fair: no flow
// can go faster without slowing one that is no faster than it. Progressive
// filling finds them (Bertsekas and Gallager, Data Networks, 6.5.2): the port
// whose bandwidth left, split evenly among its flows not yet given a rate, is
// the bottleneck; its flows get that share, which the other port of each gives
// up too; repeat until every flow has a rate.
//
//   port A (10 GB/s): flows 1, 2       A's share 5, B's 10: A is the bottleneck,
//   port B (20 GB/s): flows 2, 3       flows 1 and 2 get 5; B has 15 left for flow 3
//
// Data in, rates out: the engine says which ports carry which flows and which
// ports changed since the last solve; the solver answers the rate of every flow
// linked to a changed port through shared ports (no other flow's rate can
// change), so a flow alone on its ports costs one solve and leaves every other
// flow's rate, and scheduled end, as it was.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace labkit::sim {

// A port as the solver sees it: its bandwidth (bytes per second) and the flows
// through it now, in the order they joined, each with the port at its other end.
struct SharedPort {
  struct Flow {
    int id = -1;
    int other_port = -1;
  };
  double bandwidth = 0;
  std::vector<Flow> flows;
};

class FairSharing {
 public:
  struct Rate {
    int flow = -1;
    double bytes_per_second = 0;
  };
  // The max-min fair rate of every flow linked to a `touched` port through
  // shared ports, in the order reached from the touched ports (the engine
  // schedules their ends in this order, so ties stay reproducible). Empty when
  // nothing was touched.
  const std::vector<Rate>& solve(std::span<const SharedPort> ports, std::span<const int> touched);

 private:
  void reach_linked(std::span<const SharedPort> ports, std::span<const int> touched);
  void fill_progressively(std::span<const SharedPort> ports);
  // While rates are solved, what a reached port has not yet given, to how many flows.
  struct PortLeft {
    double bandwidth = 0;
    int flows = 0;
    std::uint64_t reached_in = 0;  // the last solve that reached it
  };
  struct FlowMark {
    std::uint64_t reached_in = 0, rated_in = 0;  // the last solve that reached it, and that gave it a rate
    std::size_t answer = 0;                      // its entry in rates_
  };
  std::uint64_t solves_ = 0;
  std::vector<PortLeft> ports_;
  std::vector<FlowMark> flows_;
  std::vector<int> reached_ports_;  // a solve's, kept to spare allocations
  std::vector<Rate> rates_;
};

}  // namespace labkit::sim

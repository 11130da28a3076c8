// Lab 7: tensor parallelism. One file per view of it:
//   main.cpp     the tiny GPT split over the ranks, equal to one rank; what it keeps, sends and holds
//   what_if.cpp  --what-if: a real model's layer with its allreduces inside a node and across nodes
//   traffic.cpp  one layer's f and g, from the trace
//   context_parallel.cpp  --cp: attention over sequence shards, ring attention in two layouts
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "labkit/memory.h"
#include "labkit/parallel/ring_attention.h"
#include "labkit/run.h"
#include "labkit/trace.h"

namespace tp_lab {

using namespace labkit;

struct Options {
  bool sp = false;  // sequence parallelism: norms and residuals on sequence shards
  int steps = 10, batch = 4;
  float lr = 0.05f;
  std::uint64_t seed = 1337;
  std::string json;
  std::string what_if;  // a model preset: its layer, payload-free, instead of the tiny GPT
  bool bench = false;   // what the simulation costs in wall time
  int cp = 0;           // context parallelism: attention over this many sequence shards (0: off)
  int tp = 0;           // with --cp: ranks per head group (0: the ranks over cp)
  int seq = 0;          // with --cp or --what-if: the sequence length (0: the model's context)
  std::string plot;     // layer 0's timeline with f and g; with --cp the layouts' attention matrices (.svg or .png)
};

// One of a layer's f and g as the run executed it: its collective (empty:
// the identity) with its bytes and time, from rank 0's trace.
struct LayerPlace {
  std::string pass, op, where, collective;
  double bytes = 0, seconds = 0;
};
// A step of the layer on rank 0, in the order it ran: a compute region (op
// empty) or one of its f and g (label "f: all_reduce", or "f: identity").
struct LayerStep {
  std::string pass, label, op;
};
struct LayerTraffic {
  std::vector<LayerPlace> places;
  std::vector<LayerStep> steps;
};
LayerTraffic layer_traffic(const TraceTrack& rank0, bool sp, double step_start);
nlohmann::json print_layer_traffic(const std::vector<LayerPlace>& places);
void plot_layer(const LayerTraffic& layer, int ranks, bool sp, const std::string& path);  // the f and g picture

int what_if(const Options& o, RunOptions run_options);
// Why t tensor-parallel ranks cannot split a model's layer ("" if they can):
// heads, kv heads or the MLP's width that t does not divide.
std::string tensor_parallel_refusal(const memory::Architecture& a, int t);
// The tiny GPT's attention (`whole`: all its heads over the whole batch and sequence) over --cp ranks.
int context_parallel(const Options& o, const RunOptions& run_options, const AttentionShape& whole);

}  // namespace tp_lab

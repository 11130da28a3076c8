// Lab 7: tensor parallelism. One file per view of it:
//   main.cpp     the tiny GPT split over the ranks, equal to one rank; what it keeps, sends and holds
//   what_if.cpp  --what-if: a real model's layer with its allreduces inside a node and across nodes
#pragma once

#include <cstdint>
#include <string>

#include "labkit/run.h"

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
};

int what_if(const Options& o, RunOptions run_options);

}  // namespace tp_lab

// A sim run chosen in the UI or on the command line ("ring:8:1M"): which
// collective, algorithm, rank count, size and topology.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "labkit/parallel/moe.h"
#include "trace_model.h"

namespace viz {

struct Scenario {
  std::string collective = "all_reduce";
  std::string algorithm = "ring";
  int ranks = 8;
  std::uint64_t bytes = 1 << 20;
  std::string topology = "dgx-h100";
  std::string ddp_mode;  // a DDP step instead ("ddp:8:overlap"): naive, bucketed or overlap
  int fsdp_stage = -1;   // or a ZeRO step ("fsdp:16:3:both"): stage 0-3, and what stage 3 prefetches
  std::string prefetch = "none";
  bool tensor_parallel = false;    // or a tensor-parallel step of the tiny GPT ("tp:4:sp")
  bool sequence_parallel = false;
  std::string cp_layout;  // or ring attention over the ranks ("cp:8:zigzag"): contiguous or zigzag
  std::string pipeline;   // or a pipeline schedule's step ("pp:4:zb-h1:8"): naive, gpipe, 1f1b, interleaved, zb-h1, zbv
  int microbatches = 8;
  int moe_ep = 0;  // or the MoE GPT's training ("moe:4:none:40"): ep ranks, the balance, the steps
  std::string balance = "aux";
  int steps = 20;
  bool is_training_step() const {
    return !ddp_mode.empty() || fsdp_stage >= 0 || tensor_parallel || !cp_layout.empty() || !pipeline.empty() ||
           moe_ep > 0;
  }
};

// "ALGO:RANKS:SIZE[:COLLECTIVE[:TOPOLOGY]]", e.g. "ring:8:1M"; or
// "ddp:RANKS:MODE[:TOPOLOGY]", one data-parallel step of Llama-2 7B's shapes
// (the DDP lab's --what-if), e.g. "ddp:8:overlap"; or
// "fsdp:RANKS:STAGE[:PREFETCH[:TOPOLOGY]]", one sharded step of the same
// (the FSDP lab's --what-if), e.g. "fsdp:16:3:both"; or "tp:RANKS[:sp[:TOPOLOGY]]",
// one forward and backward of the tiny GPT with tensor parallelism over 1, 2 or
// 4 ranks (the tp lab; sp: sequence parallel), e.g. "tp:4:sp"; or
// "cp:RANKS[:contiguous|zigzag[:TOPOLOGY]]", ring attention's forward and
// backward over a sequence of 65536 split across the ranks (the tp lab's --cp,
// payload-free), e.g. "cp:8:contiguous"; or
// "pp:STAGES:SCHEDULE[:MICROBATCHES[:TOPOLOGY]]", one step of a pipeline
// schedule over GPT-3's 96 layers (the pipeline lab's --what-if, payload-free),
// each rank's track its stage's grid row, e.g. "pp:4:zb-h1:8"; or
// "moe:EP[:BALANCE[:STEPS[:TOPOLOGY]]]", the MoE lab's GPT (8 experts, top-2,
// capacity factor 1.25) trained on EP ranks (1, 2, 4 or 8) with none, aux or
// bias balancing, e.g. "moe:4:none:40". Throws on junk.
Scenario parse_scenario(const std::string& text);

// What an moe scenario's routers did, step by step: each layer's assignments
// per expert before and after capacity, over the whole ep group (the lab's
// table).
struct RoutingHistory {
  int top_k = 0;
  double capacity_factor = 0;
  std::vector<std::vector<labkit::RoutingStats>> steps;  // [step][layer]
  int experts() const { return steps.empty() ? 0 : int(steps[0][0].chosen.size()); }
  int layers() const { return steps.empty() ? 0 : int(steps[0].size()); }
};

// Runs it on the simulator (payload-free, but the tiny GPT's steps, which
// compute) and returns its trace; an moe scenario's routing, from the same
// run, into `routing` when given (left alone for any other scenario).
TraceModel run_scenario(const Scenario& s, RoutingHistory* routing = nullptr);

// Every rank's buffer, chunk by chunk, after every delivery. Rank r contributes
// the bit 1 << r, so a chunk's value is the set of ranks whose data it holds
// (the replay of `ring_allreduce --step`: a deterministic run stopped at each
// delivery). For all_reduce, all_gather and broadcast on up to 16 ranks and
// 64 MiB; empty otherwise.
struct ChunkHistory {
  std::vector<double> times;                                    // state i holds from times[i] on
  std::vector<std::vector<std::vector<std::uint64_t>>> states;  // [state][rank][chunk]
  std::uint64_t everyone = 0;                                   // the bits of all ranks
};
ChunkHistory chunk_history(const Scenario& s);

}  // namespace viz

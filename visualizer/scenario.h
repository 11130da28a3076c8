// What the visualizer simulates live, chosen on the command line ("ring:8:1M")
// or in the Run panel: a collective, or one step of a lab (DDP, ZeRO, tensor
// and context parallelism, a pipeline schedule, the MoE GPT's training). Each
// kind is one file in scenarios/, with its options, its parser and its run;
// scenario.cpp's table finds a text's kind by its first field.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "labkit/parallel/moe.h"
#include "trace_model.h"

namespace labkit {
struct RunOptions;
}

namespace viz {

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

// What a run gives the panels: its trace, and what only some kinds have.
struct ScenarioRun {
  TraceModel trace;
  ChunkHistory chunks{};     // a collective's, for the data-flow view
  RoutingHistory routing{};  // the MoE GPT's training's, for the MoE routing panel
};

// One scenario: the ranks and topology every kind has; its kind adds its own
// options, its run and its Run-panel fields.
struct Scenario {
  int ranks = 8;
  std::string topology = "dgx-h100";

  virtual ~Scenario() = default;
  // Runs it on the simulator (payload-free, but for the tiny GPT's steps,
  // which compute) and returns what the panels show.
  virtual ScenarioRun run() const = 0;
  // The Run panel's fields (Dear ImGui widgets that edit this scenario):
  // ranks and topology, unless the kind has more.
  virtual void draw_fields();

 protected:
  labkit::RunOptions run_options() const;  // on these ranks and topology, payload-free, the trace kept
  void draw_ranks();
  void draw_topology();
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
std::unique_ptr<Scenario> parse_scenario(const std::string& text);

}  // namespace viz

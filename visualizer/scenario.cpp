#include "scenario.h"

#include <algorithm>
#include <charconv>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "labkit/algorithms.h"
#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/optim.h"
#include "labkit/parallel/data_parallel.h"
#include "labkit/parallel/fully_sharded.h"
#include "labkit/parallel/moe_gpt.h"
#include "labkit/parallel/pipeline_executor.h"
#include "labkit/parallel/ring_attention.h"
#include "labkit/parallel/sampler.h"
#include "labkit/parallel/sequences.h"
#include "labkit/parallel/tensor_parallel_gpt.h"
#include "labkit/run.h"
#include "labkit/topology.h"
#include "labkit/units.h"

namespace viz {

namespace {
constexpr int kMaxRanks = 1 << 20;  // as --ranks
// A cp scenario's sequence: long enough that each rank's attention blocks
// outlast the K/V messages, so that the contiguous layout's imbalance shows.
constexpr int kContextSequence = 65536;
// A pp scenario's model: GPT-3 (96 layers, h = 12288), micro-batches of one 2048-token sequence.
constexpr int kPipelineLayers = 96;
constexpr double kPipelineTokens = 2048;

// An moe scenario's model and training, the moe lab's defaults.
constexpr int kMoeExperts = 8, kMoeTopK = 2, kMoeBatch = 8;
constexpr double kMoeCapacityFactor = 1.25;
constexpr float kMoeLearningRate = 0.01f;
constexpr std::uint64_t kMoeSeed = 1337;

// `text` is a whole number from min to max (no sign, no trailing junk): into value.
bool whole_number(const std::string& text, int min, int max, int& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return end == text.data() + text.size() && error == std::errc() && value >= min && value <= max;
}

// Trains the MoE GPT s.steps steps on s.moe_ep simulated ranks, each on its
// share of every batch, as the moe lab does; records its routing when asked.
labkit::RunResult train_moe(const Scenario& s, RoutingHistory* history) {
  const labkit::Sequences data = labkit::training_sequences(kMoeSeed, labkit::gpt_preset("tiny-gpt", 1).max_seq);
  const labkit::GptConfig config = labkit::gpt_preset("tiny-gpt", data.tokens.vocab);
  const labkit::MoeConfig moe{.experts = kMoeExperts, .top_k = kMoeTopK, .capacity_factor = kMoeCapacityFactor,
                              .balance = labkit::parse_balance(s.balance)};
  labkit::RunOptions o;
  o.ranks = s.moe_ep;
  o.topology = s.topology;
  o.keep_trace = true;
  if (history) *history = {kMoeTopK, kMoeCapacityFactor, {}};
  return labkit::run(o, [&](labkit::Comm& comm) {
    const int share = kMoeBatch / comm.size(), T = config.max_seq;
    const labkit::DistributedSampler sampler(data.count, 1, 0, kMoeSeed);
    labkit::MoeGpt model(config, moe, comm.size(), comm.rank(), kMoeSeed);
    labkit::SgdMomentum dense{.lr = kMoeLearningRate}, experts{.lr = kMoeLearningRate};
    std::vector<int> x, y;
    for (int step = 0; step < s.steps; ++step) {
      const std::vector<std::size_t> batch = labkit::batch_of(sampler, step, kMoeBatch);
      labkit::fill_batch(data, {batch.begin() + comm.rank() * share, batch.begin() + (comm.rank() + 1) * share}, x, y);
      model.train_step(comm, x, y, share, T, [&](std::span<float> w, std::span<const float> g) { dense.update(w, g); },
                       [&](std::span<float> w, std::span<const float> g) { experts.update(w, g); });
      if (!history || comm.rank() != 0) continue;  // the stats are the group's, alike on every rank
      auto& layers = history->steps.emplace_back();
      for (int l = 0; l < config.layers; ++l) layers.push_back(model.layer(l).stats());
    }
  });
}

labkit::Schedule pipeline_schedule(const Scenario& s) {
  return labkit::make_schedule(s.pipeline, s.ranks, s.microbatches,
                               s.pipeline == "interleaved" || s.pipeline == "zbv" ? 2 : 1);
}
}

Scenario parse_scenario(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  const std::size_t fewest =
      !parts.empty() && (parts[0] == "tp" || parts[0] == "cp" || parts[0] == "moe") ? 2 : 3;  // "tp:4", "moe:4"
  if (parts.size() < fewest || parts.size() > 5)
    throw labkit::Error(fmt::format("'{}' is not ALGO:RANKS:SIZE[:COLLECTIVE[:TOPOLOGY]] (e.g. ring:8:1M)", text));
  Scenario s;
  s.algorithm = parts[0];
  if (!whole_number(parts[1], 1, kMaxRanks, s.ranks))
    throw labkit::Error(fmt::format("'{}': '{}' is not a rank count from 1 to {}", text, parts[1], kMaxRanks));
  if (s.algorithm == "ddp") {
    if (parts.size() > 4) throw labkit::Error(fmt::format("'{}' is not ddp:RANKS:MODE[:TOPOLOGY]", text));
    s.ddp_mode = std::string(labkit::name_of(labkit::parse_ddp_mode(parts[2])));
    if (parts.size() > 3) s.topology = parts[3];
    labkit::find_topology(s.topology);
    return s;
  }
  if (s.algorithm == "fsdp") {
    if (parts.size() > 5 || parts[2].size() != 1 || parts[2][0] < '0' || parts[2][0] > '3')
      throw labkit::Error(fmt::format("'{}' is not fsdp:RANKS:STAGE[:PREFETCH[:TOPOLOGY]] (stage 0-3)", text));
    s.fsdp_stage = parts[2][0] - '0';
    if (parts.size() > 3) {
      labkit::parse_prefetch(parts[3]);  // throws, naming the choices
      s.prefetch = parts[3];
    }
    if (parts.size() > 4) s.topology = parts[4];
    labkit::find_topology(s.topology);
    return s;
  }
  if (s.algorithm == "tp") {
    const bool heads_split = s.ranks == 1 || s.ranks == 2 || s.ranks == 4;  // the tiny GPT's 4 heads
    if (parts.size() > 4 || !heads_split || (parts.size() > 2 && parts[2] != "sp" && parts[2] != "-"))
      throw labkit::Error(fmt::format("'{}' is not tp:RANKS[:sp|-[:TOPOLOGY]] (ranks 1, 2 or 4: the tiny GPT's 4 "
                                      "heads split whole)", text));
    s.tensor_parallel = true;
    s.sequence_parallel = parts.size() > 2 && parts[2] == "sp";
    if (parts.size() > 3) s.topology = parts[3];
    labkit::find_topology(s.topology);
    return s;
  }
  if (s.algorithm == "cp") {
    if (parts.size() > 4 || (parts.size() > 2 && parts[2] != "contiguous" && parts[2] != "zigzag") ||
        kContextSequence % (2 * s.ranks) != 0)
      throw labkit::Error(fmt::format("'{}' is not cp:RANKS[:contiguous|zigzag[:TOPOLOGY]] (ranks dividing {}: the "
                                      "zig-zag layout cuts the sequence into 2 x RANKS chunks)", text,
                                      kContextSequence / 2));
    s.cp_layout = parts.size() > 2 ? parts[2] : "zigzag";
    if (parts.size() > 3) s.topology = parts[3];
    labkit::find_topology(s.topology);
    return s;
  }
  if (s.algorithm == "moe") {
    const bool steps = parts.size() < 4 || whole_number(parts[3], 1, 1000, s.steps);
    if (parts.size() > 5 || kMoeExperts % s.ranks != 0 || !steps)
      throw labkit::Error(fmt::format("'{}' is not moe:EP[:none|aux|bias[:STEPS[:TOPOLOGY]]] (EP dividing the {} "
                                      "experts, 1 to 1000 steps)", text, kMoeExperts));
    s.moe_ep = s.ranks;
    if (parts.size() > 2) s.balance = std::string(labkit::name_of(labkit::parse_balance(parts[2])));
    if (parts.size() > 4) s.topology = parts[4];
    labkit::find_topology(s.topology);
    return s;
  }
  if (s.algorithm == "pp") {
    s.pipeline = parts[2];
    if (parts.size() > 3 && !whole_number(parts[3], 1, 1024, s.microbatches))
      throw labkit::Error(fmt::format("'{}': '{}' is not a micro-batch count from 1 to 1024", text, parts[3]));
    if (parts.size() > 4) s.topology = parts[4];
    const int chunks = s.ranks * (s.pipeline == "interleaved" || s.pipeline == "zbv" ? 2 : 1);
    if (kPipelineLayers % chunks != 0)
      throw labkit::Error(fmt::format("'{}' is not pp:STAGES:SCHEDULE[:MICROBATCHES[:TOPOLOGY]] with GPT-3's {} "
                                      "layers cut into equal chunks ({} do not divide them)", text, kPipelineLayers,
                                      chunks));
    pipeline_schedule(s);  // throws, naming the schedules and what each needs
    labkit::find_topology(s.topology);
    return s;
  }
  s.bytes = labkit::parse_bytes(parts[2]);
  if (parts.size() > 3) s.collective = parts[3];
  if (parts.size() > 4) s.topology = parts[4];
  labkit::check_algorithm(labkit::parse_collective(s.collective), s.algorithm);
  labkit::find_topology(s.topology);
  return s;
}

TraceModel run_scenario(const Scenario& s, RoutingHistory* routing) {
  labkit::RunOptions o;
  o.ranks = s.ranks;
  o.topology = s.topology;
  o.payload_free = true;
  o.keep_trace = true;
  if (!s.ddp_mode.empty()) {  // compute on each rank's track, each bucket's allreduce on its comm stream
    const labkit::ShapedModel llama = labkit::shaped_model(labkit::memory::model_preset("llama2-7b"), 2.0);
    const labkit::RunResult r = labkit::run(o, [&](labkit::Comm& comm) {
      labkit::shaped_step(comm, llama, labkit::parse_ddp_mode(s.ddp_mode));
    });
    return from_trace(*r.trace, fmt::format("DDP step ({}) of Llama-2 7B's shapes on {} ranks, {}", s.ddp_mode,
                                            s.ranks, s.topology));
  }
  if (s.tensor_parallel) {  // each layer's compute between its allreduces (SP: all-gathers and reduce-scatters)
    o.payload_free = false;
    const labkit::GptConfig config = labkit::gpt_preset("tiny-gpt", 32);
    const int B = 4, T = config.max_seq;
    std::vector<int> tokens(std::size_t(B) * T);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = int(i * 7 % 32);
    const labkit::RunResult r = labkit::run(o, [&](labkit::Comm& comm) {
      labkit::TensorParallelGpt model(comm, labkit::Gpt(config, 1), s.sequence_parallel);
      model.forward(tokens, tokens, B, T);
      model.backward();
    });
    return from_trace(*r.trace, fmt::format("tensor-parallel step of the tiny GPT on {} ranks{}, {}", s.ranks,
                                            s.sequence_parallel ? ", sequence parallel" : "", s.topology));
  }
  if (!s.cp_layout.empty()) {  // each step of the ring: a block's compute, the next block's message beside it
    const labkit::SequenceLayout layout =
        s.cp_layout == "zigzag" ? labkit::SequenceLayout::zigzag : labkit::SequenceLayout::contiguous;
    const labkit::RunResult r = labkit::run(o, [&](labkit::Comm& comm) {
      labkit::RingAttention ring(comm, layout, {.B = 4, .T = kContextSequence, .C = 64, .NH = 4});
      ring.forward(nullptr, nullptr);
      ring.backward(nullptr, nullptr);
    });
    return from_trace(*r.trace, fmt::format("ring attention over {} positions of the tiny GPT's heads on {} ranks, "
                                            "{} layout, {}", kContextSequence, s.ranks, labkit::name_of(layout),
                                            s.topology));
  }
  if (!s.pipeline.empty()) {  // each stage's forwards and backwards in its schedule's order, the messages between
    const labkit::memory::Architecture gpt3 = labkit::memory::model_preset("gpt3-175b");
    const labkit::Schedule schedule = pipeline_schedule(s);
    const double layers = double(kPipelineLayers) / schedule.chunks();
    const labkit::memory::LayerFlops layer = labkit::memory::layer_flops(gpt3, kPipelineTokens, kPipelineTokens);
    const labkit::RunResult r = labkit::run(o, [&](labkit::Comm& comm) {
      labkit::play_payload_free(comm, schedule,
                                {layers * layer.forward, layers * layer.backward_input, layers * layer.backward_weight},
                                std::size_t(kPipelineTokens * gpt3.hidden * 2));
    });
    return from_trace(*r.trace, fmt::format("{} pipeline step of GPT-3 on {} stages, {} micro-batches, {}",
                                            schedule.name, s.ranks, s.microbatches, s.topology));
  }
  if (s.moe_ep > 0) {  // every step: each layer's routing, its tokens' all-to-alls, the gradients averaged
    const labkit::RunResult r = train_moe(s, routing);
    return from_trace(*r.trace, fmt::format("the MoE GPT ({} experts, top-{}, {} balancing) trained {} steps on "
                                            "{} ep ranks, {}", kMoeExperts, kMoeTopK, s.balance, s.steps, s.moe_ep,
                                            s.topology));
  }
  if (s.fsdp_stage >= 0) {  // each layer's gathers and reduce-scatters on the comm streams, beside its compute
    const labkit::memory::Architecture llama = labkit::memory::model_preset("llama2-7b");
    const labkit::RunResult r = labkit::run(o, [&](labkit::Comm& comm) {
      labkit::sharded_shaped_step(comm, llama, 2.0, s.fsdp_stage, {.prefetch = labkit::parse_prefetch(s.prefetch)});
    });
    return from_trace(*r.trace, fmt::format("ZeRO stage {} step of Llama-2 7B's shapes on {} ranks, {}, prefetch {}",
                                            s.fsdp_stage, s.ranks, s.topology, s.prefetch));
  }
  o.algos = {s.collective + "=" + s.algorithm};
  const labkit::Collective op = labkit::parse_collective(s.collective);
  const std::size_t count = s.bytes / 4;
  const labkit::RunResult r = labkit::run(o, [&](labkit::Comm& comm) {
    const std::size_t block = count / comm.size();
    const labkit::View whole = labkit::sizes_only(block * comm.size(), labkit::DType::f32);
    const labkit::View part = labkit::sizes_only(block, labkit::DType::f32);
    switch (op) {
      case labkit::Collective::all_gather: comm.all_gather(part, whole); break;
      case labkit::Collective::reduce_scatter: comm.reduce_scatter(whole, part, labkit::ReduceOp::sum); break;
      case labkit::Collective::all_to_all: comm.all_to_all(whole, whole); break;
      case labkit::Collective::all_to_allv: {
        const std::vector<std::size_t> blocks(comm.size(), block);
        comm.all_to_allv(whole, blocks, whole, blocks);
        break;
      }
      case labkit::Collective::gather: comm.gather(part, whole, 0); break;
      case labkit::Collective::scatter: comm.scatter(whole, part, 0); break;
      default: comm.run({op, {}, whole, labkit::ReduceOp::sum, 0});
    }
  });
  return from_trace(*r.trace, fmt::format("{} {} on {} ranks, {}, {}", s.algorithm, s.collective, s.ranks,
                                          labkit::format_bytes(s.bytes), s.topology));
}

ChunkHistory chunk_history(const Scenario& s) {
  if (s.is_training_step()) return {};
  const labkit::Collective op = labkit::parse_collective(s.collective);
  const bool shown = op == labkit::Collective::all_reduce || op == labkit::Collective::all_gather ||
                     op == labkit::Collective::broadcast;
  if (!shown || s.ranks > 16 || s.bytes > (64u << 20)) return {};
  const int p = s.ranks;
  const std::size_t count = std::max<std::size_t>(s.bytes / 8 / p, 1) * p;  // i64 elements, P whole blocks
  std::vector<std::vector<std::int64_t>> buffers(p);
  auto rank_fn = [&](labkit::Comm& comm) {
    const int r = comm.rank();
    const std::int64_t mine = std::int64_t(1) << r;
    std::vector<std::int64_t>& buf = buffers[r];
    if (op == labkit::Collective::all_gather) {
      std::vector<std::int64_t> block(count / p, mine);
      buf.assign(count, 0);
      comm.all_gather(labkit::view_of(block), labkit::view_of(buf));
    } else if (op == labkit::Collective::broadcast) {
      buf.assign(count, r == 0 ? mine : 0);
      comm.broadcast(labkit::view_of(buf), 0);
    } else {
      buf.assign(count, mine);
      comm.all_reduce(labkit::view_of(buf), labkit::ReduceOp::sum);
    }
  };
  labkit::RunOptions o;
  o.ranks = p;
  o.topology = s.topology;
  o.algos = {s.collective + "=" + s.algorithm};
  o.keep_trace = true;
  const labkit::RunResult whole = labkit::run(o, rank_fn);

  ChunkHistory h;
  h.everyone = (std::uint64_t(1) << p) - 1;
  h.times = {0};
  for (const labkit::TraceTrack& t : whole.trace->tracks())
    for (const labkit::TraceEvent& e : t.events)
      if (e.kind == labkit::TraceEvent::Kind::recv) h.times.push_back(e.end);
  std::sort(h.times.begin(), h.times.end());
  h.times.erase(std::unique(h.times.begin(), h.times.end()), h.times.end());
  if (h.times.size() > 256) return {};
  o.keep_trace = false;
  for (double t : h.times) {
    o.stop_at = t;
    labkit::run(o, rank_fn);
    auto& state = h.states.emplace_back(p, std::vector<std::uint64_t>(p));
    for (int r = 0; r < p; ++r)
      for (int c = 0; c < p; ++c)  // the first element of chunk c stands for the chunk
        state[r][c] = std::uint64_t(buffers[r][labkit::chunk_range(count, p, c).offset]);
  }
  return h;
}

}  // namespace viz

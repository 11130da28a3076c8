#include "labkit/parallel/pipeline_executor.h"

#include <algorithm>

#include "labkit/error.h"
#include "labkit/modules.h"
#include "labkit/ops.h"

namespace labkit {

namespace {

// Sorted, with overlapping or touching ranges joined.
std::vector<ParameterRange> merged(std::vector<ParameterRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::vector<ParameterRange> out;
  for (const ParameterRange& r : ranges)
    if (!out.empty() && r.offset <= out.back().offset + out.back().count)
      out.back().count = std::max(out.back().count, r.offset + r.count - out.back().offset);
    else
      out.push_back(r);
  return out;
}

// Where each micro-batch's last action on a stage is: its activation set goes
// back to the pool after it (and after the sends from it are done).
std::vector<std::size_t> last_actions(const std::vector<PipeAction>& actions, int microbatches) {
  std::vector<std::size_t> last(std::size_t(microbatches), 0);
  for (std::size_t i = 0; i < actions.size(); ++i) last[std::size_t(actions[i].microbatch)] = i;
  return last;
}

// The activation sets a stage needs: a micro-batch takes one at its first
// action here and gives it back after its last.
int activation_sets(const std::vector<PipeAction>& actions, const std::vector<std::size_t>& last) {
  std::vector<bool> holding(last.size(), false);
  int held = 0, most = 0;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const std::size_t m = std::size_t(actions[i].microbatch);
    if (!holding[m]) holding[m] = true, most = std::max(most, ++held);
    if (last[m] == i) --held;
  }
  return most;
}

}  // namespace

PipelineExecutor::PipelineExecutor(Comm& pp, Gpt& model, Schedule schedule)
    : pp_(pp), model_(model), schedule_(std::move(schedule)) {
  const int C = schedule_.chunks(), L = model_.config().layers;
  if (pp_.size() != schedule_.stages)
    fail(pp_.who(), "pipeline", "the {} schedule has {} stages and the pipeline group {} ranks", schedule_.name,
         schedule_.stages, pp_.size());
  if (L % C != 0)
    fail(pp_.who(), "pipeline", "{} layers do not cut into {} equal chunks ({} stages x {} virtual)", L, C,
         schedule_.stages, schedule_.virtual_stages);
  try {
    validate(schedule_);
  } catch (const Error& e) {
    fail(pp_.who(), "pipeline", "{}", e.what());
  }
  const std::vector<PipeAction>& actions = schedule_.actions[std::size_t(stage())];
  last_action_ = last_actions(actions, schedule_.microbatches);
  sets_ = activation_sets(actions, last_action_);

  const bool first = holds(0), last = holds(C - 1);
  const GptConfig& g = model_.config();
  std::vector<ParameterRange> mine;
  std::vector<bool> held(std::size_t(L), false);
  for (int c = 0; c < C; ++c)
    if (holds(c))
      for (int l = layers_of(c).first; l < layers_of(c).second; ++l)
        mine.push_back(model_.layer_range(l)), held[std::size_t(l)] = true;
  model_.hold_layers(std::move(held));  // each activation set: this stage's layers, and the others' outputs only
  const ParameterRange after_layers = model_.layer_range(L - 1);
  const std::size_t final_norm = after_layers.offset + after_layers.count;
  if (first) mine.push_back({0, model_.layer_range(0).offset});  // the token and position embeddings
  if (last) mine.push_back({0, std::size_t(g.vocab) * g.channels}), mine.push_back({final_norm, model_.parameter_count() - final_norm});
  owned_ = merged(std::move(mine));
  embedding_group_ = pp_.split(first || last ? 0 : -1, stage());
}

std::pair<int, int> PipelineExecutor::layers_of(int chunk) const {
  const int per_chunk = model_.config().layers / schedule_.chunks();
  return {chunk * per_chunk, (chunk + 1) * per_chunk};
}

// A block's weights' gradients are its four Linears' dW (each as costly as
// the Linear's forward); the rest of its backward (their dx and attention's
// backward, twice attention's forward) is the input's. The head's backward
// runs with the input's part.
PipeTimes PipelineExecutor::chunk_flops(int chunk, int B, int T) const {
  const auto [first, last] = layers_of(chunk);
  const double layers = last - first, block = model_.block_flops(B, T);
  const double head = chunk == schedule_.chunks() - 1 ? model_.head_flops(B, T) : 0;
  const double forward = layers * block + head;
  const double weights = layers * (block - ops::attention_flops(B, T, model_.config().channels));
  return {forward, 2 * forward - weights, weights, 0};
}

std::size_t PipelineExecutor::chunk_activation_bytes(int chunk, int B, int T) const {
  const GptConfig& g = model_.config();
  Carver counter(nullptr, nullptr);
  const auto [first, last] = layers_of(chunk);
  for (int l = first; l < last; ++l) Block::Acts(counter, B, T, g.channels, g.heads);
  if (chunk == 0) counter.take(std::size_t(B) * T * g.channels);  // the embeddings' output
  if (chunk == schedule_.chunks() - 1) {
    LayerNorm::Acts(counter, B * T, g.channels);
    counter.take(2 * std::size_t(B) * T * g.vocab + std::size_t(B) * T);  // logits, probabilities, losses
  }
  return 2 * counter.taken() * sizeof(float);  // and their gradients
}

PipelineStep PipelineExecutor::step(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T) {
  const int M = schedule_.microbatches, C = schedule_.chunks();
  if (B % M != 0)
    fail(pp_.who(), "pipeline step", "a batch of {} sequences does not cut into {} equal micro-batches", B, M);
  if (tokens.size() != std::size_t(B) * T || targets.size() != tokens.size())
    fail(pp_.who(), "pipeline step", "{} tokens and {} targets for a batch of {} x {}", tokens.size(), targets.size(),
         B, T);
  const int b = B / M;
  PipelineStep out;
  out.start = pp_.now();
  model_.zero_grad();

  // Micro-batch m's activation set while it is held here.
  std::vector<int> set_of(std::size_t(M), -1);
  std::vector<int> free_sets(static_cast<std::size_t>(sets_));
  for (int s = 0; s < sets_; ++s) free_sets[std::size_t(s)] = sets_ - 1 - s;
  std::vector<std::vector<Request>> sends(static_cast<std::size_t>(sets_));  // in flight from each set's buffers
  const auto enter = [&](int m) {
    int& set = set_of[std::size_t(m)];
    if (set >= 0) return model_.use_activations(set);
    set = free_sets.back();
    free_sets.pop_back();
    out.activation_sets = std::max(out.activation_sets, sets_ - int(free_sets.size()));
    model_.prepare(b, T, set, sets_);
  };
  const auto release = [&](int m) {
    const int set = std::exchange(set_of[std::size_t(m)], -1);
    for (Request& r : sends[std::size_t(set)]) r.wait();
    sends[std::size_t(set)].clear();
    free_sets.push_back(set);
  };
  const auto rows = [&](const std::vector<int>& v, int m) {
    return std::vector<int>(v.begin() + std::ptrdiff_t(m) * b * T, v.begin() + std::ptrdiff_t(m + 1) * b * T);
  };
  const auto timed = [&](const PipeAction& a, double flops, const auto& work) {
    const double started = pp_.now();
    work();
    pp_.computed(trace_name(schedule_, a), started, flops);
    out.slots.push_back({a.op, a.microbatch, a.chunk, started, pp_.now()});
  };

  // What the stage keeps for each chunk's micro-batch: from its forward until its weights' gradient.
  const auto keep = [&](int chunk, int sign) {
    pp_.track_memory(MemoryUse::activations, sign * std::int64_t(chunk_activation_bytes(chunk, b, T)));
  };
  double loss = 0;
  const std::vector<PipeAction>& actions = schedule_.actions[std::size_t(stage())];
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const PipeAction& a = actions[i];
    const int m = a.microbatch, c = a.chunk;
    const auto [first, last] = layers_of(c);
    const PipeTimes flops = chunk_flops(c, b, T);
    enter(m);
    switch (a.op) {
      case PipeOp::receive_activation:
      case PipeOp::receive_gradient:
        (void)pipeline_exchange(pp_, schedule_, a, model_, first, last);  // done when it returns
        break;
      case PipeOp::send_activation:
      case PipeOp::send_gradient:
        sends[std::size_t(set_of[std::size_t(m)])].push_back(pipeline_exchange(pp_, schedule_, a, model_, first, last));
        out.sent_bytes += model_.stream(first - 1).size_bytes();  // every message is one b x T x C residual stream
        break;
      case PipeOp::forward:
        timed(a, flops.forward, [&] {
          if (c == 0) model_.embed(rows(tokens, m));
          model_.forward_layers(first, last);
          if (c == C - 1) loss += model_.head(rows(targets, m));
        });
        keep(c, +1);
        break;
      case PipeOp::backward:
      case PipeOp::backward_input: {
        const bool whole = a.op == PipeOp::backward;
        timed(a, whole ? flops.backward_input + flops.backward_weight : flops.backward_input, [&] {
          if (c == C - 1) model_.backward_head();
          model_.backward_layers(first, last, {}, whole ? BackwardPart::all : BackwardPart::input);
          if (c == 0 && whole) model_.backward_embed();
        });
        if (whole) keep(c, -1);
        break;
      }
      case PipeOp::backward_weight:
        timed(a, flops.backward_weight, [&] {
          model_.backward_layers(first, last, {}, BackwardPart::weights);
          if (c == 0) model_.backward_embed();
        });
        keep(c, -1);
        break;
    }
    if (last_action_[std::size_t(m)] == i) release(m);
  }
  for (auto& in_flight : sends)
    for (Request& r : in_flight) r.wait();

  // The head's use of the token embeddings and the first chunk's: one gradient.
  const GptConfig& g = model_.config();
  if (embedding_group_ && embedding_group_->size() > 1)
    embedding_group_->all_reduce(view_of(std::span(model_.gradients().data(), std::size_t(g.vocab) * g.channels)),
                                 ReduceOp::sum);
  // Each micro-batch's loss is its own mean: the batch's is their mean.
  for (const ParameterRange& r : owned_)
    model_.device().divide(DType::f32, model_.gradients().data() + r.offset, r.count, M);
  out.loss = float(loss / M);
  out.end = pp_.now();
  return out;
}

PipelineStep play_payload_free(Comm& pp, const Schedule& s, const PipeTimes& flops, std::size_t message_bytes) {
  if (pp.size() != s.stages)
    fail(pp.who(), "pipeline", "the {} schedule has {} stages and the pipeline group {} ranks", s.name, s.stages,
         pp.size());
  PipelineStep out;
  out.start = pp.now();
  const View message = sizes_only(message_bytes, DType::u8);
  std::vector<Request> sends;
  for (const PipeAction& a : s.actions[std::size_t(pp.rank())]) {
    switch (a.op) {
      case PipeOp::receive_activation:
      case PipeOp::receive_gradient:
        pp.recv(message, peer_of(s, a), tag_of(s, a));
        break;
      case PipeOp::send_activation:
      case PipeOp::send_gradient:
        sends.push_back(pp.isend(message, peer_of(s, a), tag_of(s, a)));
        out.sent_bytes += message_bytes;
        break;
      default: {
        const double started = pp.now();
        pp.compute(trace_name(s, a), a.op == PipeOp::forward           ? flops.forward
                                  : a.op == PipeOp::backward_input  ? flops.backward_input
                                  : a.op == PipeOp::backward_weight ? flops.backward_weight
                                                                    : flops.backward_input + flops.backward_weight);
        out.slots.push_back({a.op, a.microbatch, a.chunk, started, pp.now()});
      }
    }
  }
  for (Request& r : sends) r.wait();
  out.end = pp.now();
  return out;
}

}  // namespace labkit

#include "labkit/parallel/pipeline_executor.h"

#include <algorithm>

#include "labkit/error.h"
#include "labkit/modules.h"
#include "labkit/ops.h"
#include "schedule_internals.h"

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
  if (last) {  // the token embeddings, which the head shares, and the final norm
    mine.push_back({0, std::size_t(g.vocab) * g.channels});
    mine.push_back({final_norm, model_.parameter_count() - final_norm});
  }
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
  Arena counter(nullptr, nullptr);
  const auto [first, last] = layers_of(chunk);
  for (int l = first; l < last; ++l) Block::Acts(counter, B, T, g.channels, g.heads);
  if (chunk == 0) counter.allocate(std::size_t(B) * T * g.channels);  // the embeddings' output
  if (chunk == schedule_.chunks() - 1) {
    LayerNorm::Acts(counter, B * T, g.channels);
    counter.allocate(2 * std::size_t(B) * T * g.vocab + std::size_t(B) * T);  // logits, probabilities, losses
  }
  return 2 * counter.allocated() * sizeof(float);  // and their gradients
}

// One step's micro-batches on this stage: micro-batch m's rows of the batch's
// tokens and targets (b sequences of T each), and the activation set it holds
// here (Gpt::prepare sizes one per micro-batch held at once): it takes a free
// one at its first action and gives it back after its last, once the sends
// that read from the set's buffers are done.
class PipelineExecutor::MicroBatches {
 public:
  MicroBatches(Gpt& model, int sets, const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T,
               int M)
      : b(B / M), T(T), model_(model), sets_(sets), tokens_(tokens), targets_(targets), set_of_(M, -1), sends_(sets) {
    for (int set = sets - 1; set >= 0; --set) free_.push_back(set);
  }
  std::vector<int> tokens(int m) const { return rows(tokens_, m); }
  std::vector<int> targets(int m) const { return rows(targets_, m); }
  // Makes m's set the model's current one, taking and sizing it at m's first action.
  void enter(int m) {
    int& set = set_of_[m];
    if (set >= 0) return model_.use_activations(set);
    set = free_.back();
    free_.pop_back();
    most_held_ = std::max(most_held_, sets_ - int(free_.size()));
    model_.prepare(b, T, set, sets_);
  }
  void sent_from(int m, Request send) { sends_[set_of_[m]].push_back(std::move(send)); }
  void leave(int m) {
    const int set = std::exchange(set_of_[m], -1);
    for (Request& r : sends_[set]) r.wait();
    sends_[set].clear();
    free_.push_back(set);
  }
  void wait_for_sends() {
    for (std::vector<Request>& in_flight : sends_)
      for (Request& r : in_flight) r.wait();
  }
  int most_held() const { return most_held_; }

  const int b, T;

 private:
  std::vector<int> rows(const std::vector<int>& batch, int m) const {
    return std::vector<int>(batch.begin() + std::ptrdiff_t(m) * b * T, batch.begin() + std::ptrdiff_t(m + 1) * b * T);
  }

  Gpt& model_;
  const int sets_;
  const std::vector<int>& tokens_;
  const std::vector<int>& targets_;
  IntVector<int> set_of_;                   // by micro-batch: -1 while it holds none
  std::vector<int> free_;               // the next to be taken last
  IntVector<std::vector<Request>> sends_;  // by set: in flight from its buffers
  int most_held_ = 0;
};

namespace {

// An action's FLOPs from its chunk's: a whole backward is its input's part and its weights'.
double flops_of(PipeOp op, const PipeTimes& chunk) {
  switch (op) {
    case PipeOp::forward: return chunk.forward;
    case PipeOp::backward_input: return chunk.backward_input;
    case PipeOp::backward_weight: return chunk.backward_weight;
    default: return chunk.backward_input + chunk.backward_weight;
  }
}

}  // namespace

PipelineStep PipelineExecutor::step(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T) {
  check_batch(tokens, targets, B, T);
  const int M = schedule_.microbatches;
  MicroBatches batch(model_, sets_, tokens, targets, B, T, M);
  PipelineStep out;
  out.start = pp_.now();
  model_.zero_grad();
  double loss = 0;
  const std::vector<PipeAction>& actions = schedule_.actions[std::size_t(stage())];
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const PipeAction& a = actions[i];
    batch.enter(a.microbatch);
    if (is_compute(a.op))
      loss += compute(batch, a, out);
    else
      exchange(batch, a, out);
    if (last_action_[std::size_t(a.microbatch)] == i) batch.leave(a.microbatch);
  }
  batch.wait_for_sends();
  out.activation_sets = batch.most_held();
  finish_gradients();
  out.loss = float(loss / M);  // each micro-batch's loss is its own mean: the batch's is their mean
  out.end = pp_.now();
  return out;
}

void PipelineExecutor::check_batch(const std::vector<int>& tokens, const std::vector<int>& targets, int B,
                                   int T) const {
  if (B % schedule_.microbatches != 0)
    fail(pp_.who(), "pipeline step", "a batch of {} sequences does not cut into {} equal micro-batches", B,
         schedule_.microbatches);
  if (tokens.size() != std::size_t(B) * T || targets.size() != tokens.size())
    fail(pp_.who(), "pipeline step", "{} tokens and {} targets for a batch of {} x {}", tokens.size(), targets.size(),
         B, T);
}

// A receive is done when it returns; a send is in flight until its micro-batch leaves.
void PipelineExecutor::exchange(MicroBatches& batch, const PipeAction& a, PipelineStep& out) {
  const auto [first, last] = layers_of(a.chunk);
  Request request = pipeline_exchange(pp_, schedule_, a, model_, first, last);
  if (a.op == PipeOp::receive_activation || a.op == PipeOp::receive_gradient) return;
  batch.sent_from(a.microbatch, std::move(request));
  out.sent_bytes += model_.stream(first - 1).size_bytes();  // every message is one b x T x C residual stream
}

// A forward or backward, timed by the Comm's clock and traced under the
// action's name, then the activations the stage keeps for it: a chunk's
// micro-batch's, from its forward until its weights' gradient. Returns the
// loss it adds: the last chunk's forward's.
double PipelineExecutor::compute(const MicroBatches& batch, const PipeAction& a, PipelineStep& out) {
  const double started = pp_.now();
  const double loss = run_layers(batch, a);
  pp_.record_compute(trace_name(schedule_, a), started, flops_of(a.op, chunk_flops(a.chunk, batch.b, batch.T)));
  out.slots.push_back({a.op, a.microbatch, a.chunk, started, pp_.now()});
  const auto bytes = std::int64_t(chunk_activation_bytes(a.chunk, batch.b, batch.T));
  if (a.op == PipeOp::forward)
    pp_.track_memory(MemoryUse::activations, bytes);
  else if (a.op != PipeOp::backward_input)
    pp_.track_memory(MemoryUse::activations, -bytes);
  return loss;
}

// The chunk's layers on the micro-batch's activation set: the first chunk
// also embeds its tokens, the last applies the head, takes the loss (returned)
// and starts the backward from it. The embeddings' gradient is weights only.
double PipelineExecutor::run_layers(const MicroBatches& batch, const PipeAction& a) {
  const auto [first, last] = layers_of(a.chunk);
  const bool embeds = a.chunk == 0, has_head = a.chunk == schedule_.chunks() - 1;
  switch (a.op) {
    case PipeOp::forward:
      if (embeds) model_.embed(batch.tokens(a.microbatch));
      model_.forward_layers(first, last);
      if (!has_head) return 0;
      model_.head(batch.targets(a.microbatch));
      return model_.loss();
    case PipeOp::backward:
    case PipeOp::backward_input: {
      const bool whole = a.op == PipeOp::backward;
      if (has_head) model_.backward_head();
      model_.backward_layers(first, last, {}, whole ? BackwardPart::all : BackwardPart::input);
      if (embeds && whole) model_.backward_embed();
      return 0;
    }
    default:  // the weights' part
      model_.backward_layers(first, last, {}, BackwardPart::weights);
      if (embeds) model_.backward_embed();
      return 0;
  }
}

// The head's use of the token embeddings and the first chunk's are one
// gradient, summed between their stages; then the mean over the micro-batches.
void PipelineExecutor::finish_gradients() {
  const GptConfig& g = model_.config();
  if (embedding_group_ && embedding_group_->size() > 1)
    embedding_group_->all_reduce(view_of(std::span(model_.gradients().data(), std::size_t(g.vocab) * g.channels)),
                                 ReduceOp::sum);
  for (const ParameterRange& r : owned_)
    model_.device().divide(DType::f32, model_.gradients().data() + r.offset, r.count, schedule_.microbatches);
}

PipelineStep play_payload_free(Comm& pp, const Schedule& s, const PipeTimes& flops, std::size_t message_bytes) {
  if (pp.size() != s.stages)
    fail(pp.who(), "pipeline", "the {} schedule has {} stages and the pipeline group {} ranks", s.name, s.stages,
         pp.size());
  PipelineStep out;
  out.start = pp.now();
  const View message = meta_view(message_bytes, DType::u8);
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
        pp.compute_flops(trace_name(s, a), flops_of(a.op, flops));
        out.slots.push_back({a.op, a.microbatch, a.chunk, started, pp.now()});
      }
    }
  }
  for (Request& r : sends) r.wait();
  out.end = pp.now();
  return out;
}

}  // namespace labkit

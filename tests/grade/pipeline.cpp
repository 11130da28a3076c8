// Grade tests for lab 8 (pipeline parallelism). 1F1B's action lists for P
// and M from 1 to 8 and 12: the validator's verdict, the bubble they achieve,
// what each stage keeps in flight and the order of its forwards; then the
// tiny GPT trained by them against one rank. The executor's sends and
// receives: every schedule's stages trained against one rank, each message
// in its place.
// Run: ./labkit grade pipeline
#include <cmath>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "checks.h"
#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/optim.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/pipeline_executor.h"

using namespace labkit;
using namespace labkit::grade;

namespace {

constexpr int kT = 16, kVocab = 15;

std::vector<int> tokens(int B, int seed) {
  std::vector<int> out(std::size_t(B) * kT);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = int((i * 7 + std::size_t(seed) * 13 + i * i) % kVocab);
  return out;
}

// Two steps of SGD with momentum on `schedule`'s stages against one rank on
// the same batches: what is wrong, or "".
std::string check_training(const Schedule& schedule, int layers) {
  GptConfig config = gpt_preset("tiny-gpt", kVocab);
  config.layers = layers, config.max_seq = kT;
  const int B = 2 * schedule.microbatches, steps = 2;
  Gpt one(config, 3);
  SgdMomentum one_sgd{.lr = 0.05f};
  for (int s = 0; s < steps; ++s) {
    one.forward(tokens(B, s), tokens(B, s + 1), B, kT);
    one.zero_grad();
    one.backward();
    one_sgd.update({one.parameters().data(), one.parameter_count()}, {one.gradients().data(), one.parameter_count()});
  }
  const std::vector<float> want = one.parameters().to_host();
  std::vector<std::string> wrong(std::size_t(schedule.stages));
  const Observed run = run_ranks(schedule.stages, [&](Comm& c) {
    Gpt model(config, 3);
    PipelineExecutor pipeline(c, model, schedule);
    std::vector<SgdMomentum> sgd(pipeline.owned().size(), SgdMomentum{.lr = 0.05f});
    for (int s = 0; s < steps; ++s) {
      pipeline.step(tokens(B, s), tokens(B, s + 1), B, kT);
      for (std::size_t i = 0; i < sgd.size(); ++i) {
        const ParameterRange r = pipeline.owned()[i];
        sgd[i].update({model.parameters().data() + r.offset, r.count}, {model.gradients().data() + r.offset, r.count});
      }
    }
    const std::vector<float> got = model.parameters().to_host();
    for (const ParameterRange& r : pipeline.owned()) {
      const double d = relative_difference({got.data() + r.offset, r.count}, {want.data() + r.offset, r.count});
      if (!(d <= 1e-5)) {
        wrong[std::size_t(c.rank())] = fmt::format("stage {}'s weights at offset {} are {:.1e} from one rank's",
                                                   c.rank(), r.offset, d);
        return;
      }
    }
  });
  if (!run.error.empty()) return run.error;
  for (const std::string& w : wrong)
    if (!w.empty()) return w;
  return "";
}

// Which of the model's residual-stream buffers `buf` is, as the exercise names them.
std::string stream_named(Gpt& model, int layers, const View& buf) {
  for (int l = -1; l < layers; ++l) {
    if (buf.data == model.stream(l).data()) return fmt::format("stream({})", l);
    if (buf.data == model.stream_grad(l).data()) return fmt::format("stream_grad({})", l);
  }
  return "a buffer that is none of the model's streams";
}

std::string label(int P, int M) { return fmt::format("P={}, M={}", P, M); }

}  // namespace

// ---- 8.1 one_f_one_b_schedule ------------------------------------------------------

TEST(one_f_one_b_schedule, TheValidatorRunsItAndItsBubbleIsTheFormulas) {
  Sweep sweep("one_f_one_b_schedule");
  for (int P = 1; P <= 8; ++P)
    for (int M : {1, 2, 3, 4, 8, 12})
      sweep.check({.p = P, .label = label(P, M)}, [&]() -> std::string {
        const Schedule s = one_f_one_b_schedule(P, M);
        if (s.stages != P || s.microbatches != M || s.actions.size() != std::size_t(P))
          return fmt::format("a schedule of {} stages and {} micro-batches with actions for {}", s.stages,
                             s.microbatches, s.actions.size());
        const ScheduleRun r = validate(s);  // throws with the action that breaks it
        const double want = (P - 1.0) / (M + P - 1);
        if (std::abs(r.bubble - want) > 1e-9)
          return fmt::format("bubble {:.4f}, the formula (P-1)/(M+P-1) {:.4f}", r.bubble, want);
        return "";
      });
  sweep.report("each stage's list: receive (not on stage 0), forward, send (not on the last stage), as add_forward "
               "writes them; the validator's message names the stage and action that break the rules.");
}

TEST(one_f_one_b_schedule, EachStageHoldsAtMostPMinusSMicroBatchesAndForwardsInOrder) {
  Sweep sweep("one_f_one_b_schedule");
  for (int P = 1; P <= 8; ++P)
    for (int M : {1, 3, 8, 12})
      sweep.check({.p = P, .label = label(P, M)}, [&]() -> std::string {
        const Schedule s = one_f_one_b_schedule(P, M);
        const ScheduleRun r = validate(s);
        for (int stage = 0; stage < P; ++stage) {
          const int want = std::min(P - stage, M), got = r.peak_in_flight[std::size_t(stage)];
          if (got != want)
            return fmt::format("stage {} holds {} micro-batches at once; 1F1B's is min(P - s, M) = {}", stage, got,
                               want);
          int next = 0;
          for (const PipeAction& a : s.actions[std::size_t(stage)])
            if (a.op == PipeOp::forward && a.microbatch != next++)
              return fmt::format("stage {} forwards micro-batch {} where {} is next", stage, a.microbatch, next - 1);
        }
        return "";
      });
  sweep.report("warm up with min(P - s - 1, M) forwards, so that stage s has P - s in flight when its first "
               "backward comes; then one forward and one backward each.");
}

TEST(one_f_one_b_schedule, TheTinyGptTrainsToOneRanksWeights) {
  Sweep sweep("one_f_one_b_schedule");
  for (int P : {2, 4})
    for (int M : {2, 4, 6})
      sweep.check({.p = P, .label = label(P, M)}, [&] { return check_training(one_f_one_b_schedule(P, M), 4); });
  sweep.report("the executor runs your actions in order on each stage: every micro-batch forwarded and backwarded "
               "once, each after what it needs.");
}

// ---- 8.2 pipeline_exchange -----------------------------------------------------------

TEST(pipeline_exchange, EveryScheduleTrainsToOneRanksWeights) {
  Sweep sweep("pipeline_exchange");
  for (int P : {2, 4})
    for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv"}) {
      const int V = std::string(name) == "interleaved" || std::string(name) == "zbv" ? 2 : 1;
      sweep.check({.p = P, .label = fmt::format("{}, P={}, M=4", name, P)},
                  [&] { return check_training(make_schedule(name, P, 4, V), 8); });
    }
  sweep.report("a stage's input arrives in stream(first - 1) and its output leaves from stream(last - 1); backward, "
               "the output's gradient arrives in stream_grad(last - 1) and the input's leaves from "
               "stream_grad(first - 1); peer_of and tag_of name the other end and the tag.");
}

TEST(pipeline_exchange, ReceivesBlockAndSendsReturnTheirRequest) {
  Sweep sweep("pipeline_exchange");
  sweep.check({.p = 2, .label = "P=2, one micro-batch"}, [&]() -> std::string {
    GptConfig config = gpt_preset("tiny-gpt", kVocab);
    config.layers = 2, config.max_seq = kT;
    const Schedule s = gpipe_schedule(2, 1);
    std::string wrong;
    std::vector<std::unique_ptr<Gpt>> models(2);  // they outlive the run, to name the buffers its messages used
    const Observed run = run_ranks(2, [&](Comm& c) {
      Gpt& model = *(models[std::size_t(c.rank())] = std::make_unique<Gpt>(config, 3));
      model.prepare(1, kT);
      const int first = c.rank(), last = c.rank() + 1;
      if (c.rank() == 0) {
        for (std::size_t i = 0; i < model.stream(0).size(); ++i) model.stream(0)[i] = float(i);
        Request sent = pipeline_exchange(c, s, {PipeOp::send_activation, 0, 0}, model, first, last);
        sent.wait();
      } else {
        (void)pipeline_exchange(c, s, {PipeOp::receive_activation, 0, 1}, model, first, last);
        for (std::size_t i = 0; i < model.stream(0).size() && wrong.empty(); ++i)
          if (model.stream(0)[i] != float(i))
            wrong = fmt::format("stage 1's stream(0)[{}] is {} after the receive returned, {} was sent", i,
                                model.stream(0)[i], float(i));
      }
    });
    if (!run.error.empty()) return run.error;
    const std::vector<Posted> sent = run.sends(0), received = run.recvs(1);
    if (sent.size() != 1 || received.size() != 1)
      return fmt::format("stage 0 sent {} messages and stage 1 received {}; one activation moves, one message",
                         sent.size(), received.size());
    if (sent[0].buf.data != models[0]->stream(0).data())
      return fmt::format("stage 0 (layers [0, 1)) sent {}; send_activation sends the stage's output, "
                         "stream(last - 1) = stream(0)", stream_named(*models[0], config.layers, sent[0].buf));
    if (received[0].buf.data != models[1]->stream(0).data())
      return fmt::format("stage 1 (layers [1, 2)) received into {}; receive_activation fills the stage's input, "
                         "stream(first - 1) = stream(0)", stream_named(*models[1], config.layers, received[0].buf));
    return wrong;
  });
  sweep.report("receive_activation on stage 1 (layers [1, 2)) fills stream(0), which stage 0 sends from its "
               "stream(0): a blocking recv, then return Request(); a send returns pp.isend(...).");
}

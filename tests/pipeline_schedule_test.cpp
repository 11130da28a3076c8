// Pipeline schedules as data: each generated schedule passes the validator
// for many P and M, its bubble is the formula's, and what it keeps in flight
// is GPipe's M, 1F1B's P - s, or the zero-bubble schedules' bound; broken
// schedules are refused with the action that breaks them.
#include <gtest/gtest.h>

#include "labkit/error.h"
#include "labkit/parallel/pipeline_schedule.h"

using namespace labkit;

namespace {

std::string error_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A chunk's times when a stage's layers are cut into V chunks: 1 forward, 1 + 1 backward per stage.
PipeTimes per_chunk(int V) { return {1.0 / V, 1.0 / V, 1.0 / V, 0}; }

}  // namespace

TEST(PipelineSchedule, EveryScheduleRunsForManyStagesAndMicrobatches) {
  for (int P = 1; P <= 8; ++P)
    for (int M = 1; M <= 12; ++M) {
      for (const char* name : {"naive", "gpipe", "1f1b", "zb-h1"})
        EXPECT_NO_THROW(validate(make_schedule(name, P, M))) << name << " P=" << P << " M=" << M;
      EXPECT_NO_THROW(validate(make_schedule("zbv", P, M, 2))) << "zbv P=" << P << " M=" << M;
      for (int V = 2; V <= 3 && M % P == 0; ++V)
        EXPECT_NO_THROW(validate(make_schedule("interleaved", P, M, V))) << "interleaved P=" << P << " M=" << M;
    }
}

// schedule_fits says yes exactly where make_schedule builds the schedule at its
// default chunks and the layers cut into equal chunks: the studies that skip
// what does not fit skip nothing that would run.
TEST(PipelineSchedule, FitsExactlyWhereTheScheduleIsMade) {
  EXPECT_EQ(default_virtual("interleaved"), 2);
  EXPECT_EQ(default_virtual("zbv"), 2);
  EXPECT_EQ(default_virtual("1f1b"), 1);
  for (const std::string_view name : kScheduleNames)
    for (int layers : {4, 6, 8})
      for (int P = 1; P <= 4; ++P)
        for (int M = 1; M <= 8; ++M) {
          const int V = default_virtual(name);
          bool made = true;
          try {
            make_schedule(name, P, M, V);
          } catch (const Error&) {
            made = false;
          }
          EXPECT_EQ(schedule_fits(name, layers, P, M), made && layers % (P * V) == 0)
              << name << " layers=" << layers << " P=" << P << " M=" << M;
        }
}

// With a backward twice a forward: naive (P-1)/P, GPipe and 1F1B (P-1)/(M+P-1);
// interleaved over V chunks the bubble's time is 1F1B's over V: (P-1)/(VM) of the ideal.
TEST(PipelineSchedule, TheBubbleIsTheFormulas) {
  for (const int M : {4, 8, 32}) {
    const int P = 4;
    EXPECT_NEAR(validate(naive_schedule(P, M)).bubble, (P - 1.0) / P, 1e-12) << "M=" << M;
    EXPECT_NEAR(validate(gpipe_schedule(P, M)).bubble, (P - 1.0) / (M + P - 1), 1e-12) << "M=" << M;
    EXPECT_NEAR(validate(one_f_one_b_schedule(P, M)).bubble, (P - 1.0) / (M + P - 1), 1e-12) << "M=" << M;
    for (const int V : {2, 4}) {
      const ScheduleRun r = validate(interleaved_schedule(P, M, V), per_chunk(V));
      const double ideal = 3.0 * M;
      EXPECT_NEAR((r.makespan - ideal) / ideal, (P - 1.0) / (V * M), 1e-12) << "M=" << M << " V=" << V;
    }
  }
  EXPECT_NEAR(validate(gpipe_schedule(4, 4)).bubble, 3.0 / 7, 1e-12);  // the 42.9%
  EXPECT_DOUBLE_EQ(validate(gpipe_schedule(4, 4)).makespan, 7 * 3.0);  // (M + P - 1)(F + B)
}

// Qi et al. 2024: ZB-H1's bubble is (P-1)(F + B - W) against 1F1B's (P-1)(F + B + W),
// a third at equal times; ZB-V's is the fill alone (below).
TEST(PipelineSchedule, ZeroBubbleSchedulesShrinkTheBubble) {
  for (const int P : {2, 4, 8}) {
    const int M = 4 * P;
    const double ideal = 3.0 * M;
    const double one_f_one_b = validate(one_f_one_b_schedule(P, M)).makespan - ideal;
    const double h1 = validate(zb_h1_schedule(P, M)).makespan - ideal;
    EXPECT_NEAR(one_f_one_b, 3.0 * (P - 1), 1e-12) << "P=" << P;
    EXPECT_NEAR(h1, P - 1.0, 1e-12) << "P=" << P;
    EXPECT_LT(validate(zbv_schedule(P, M), per_chunk(2)).makespan - ideal, h1) << "P=" << P;
  }
}

// ZB-H1's formula is the played bubble at any split of the backward: the
// weights' parts fill the (P-1)B of waiting for gradients, all of it once
// W >= B, never the last stage's (P-1)F wait for its first input. At F:B:W =
// 1:1:3 (P = 4, M = 8) that is 3 / 43 = 7.0%, where (P-1)(F+B-W) gave -8.1%.
TEST(PipelineSchedule, ZbH1FormulaHoldsWhenTheWeightsOutlastTheInput) {
  EXPECT_NEAR(*bubble_formula(zb_h1_schedule(4, 8), {1, 1, 3}), 3.0 / 43, 1e-12);
  for (const PipeTimes t : {PipeTimes{1, 1, 1}, PipeTimes{1, 1.5, 0.5}, PipeTimes{1, 1, 2}, PipeTimes{1, 1, 3},
                            PipeTimes{2, 1, 5}})
    for (const int P : {2, 4, 8})
      for (const int M : {P, 2 * P, 4 * P}) {
        const Schedule s = zb_h1_schedule(P, M);
        EXPECT_NEAR(validate(s, t).bubble, *bubble_formula(s, t), 1e-12)
            << "P=" << P << " M=" << M << " F:B:W " << t.forward << ":" << t.backward_input << ":"
            << t.backward_weight;
      }
}

// ZB-V at F = B = W: from M = 3P/2 the step is the work plus the fill, (P - 1)
// chunk forwards, and the bubble is the formula's; from M = 2P - 1 every stage
// works without a gap from its first forward to its last weight gradient (the
// paper's zero bubble). Below that, or at unequal times, the fill is a bound it
// does not beat.
TEST(PipelineSchedule, ZbvLeavesOnlyTheFill) {
  for (int P = 1; P <= 8; ++P)
    for (int M = (3 * P + 1) / 2; M <= 4 * P; ++M) {
      const Schedule s = zbv_schedule(P, M);
      const ScheduleRun r = validate(s);
      EXPECT_DOUBLE_EQ(r.makespan, (P - 1) + 6.0 * M) << "P=" << P << " M=" << M;
      EXPECT_NEAR(r.bubble, *bubble_formula(s, {}), 1e-12) << "P=" << P << " M=" << M;
      for (int stage = 0; stage < P && M >= 2 * P - 1; ++stage) {
        const auto& slots = r.slots[std::size_t(stage)];
        EXPECT_DOUBLE_EQ(slots.back().end - slots.front().start, 6.0 * M) << "P=" << P << " M=" << M << " stage " << stage;
      }
    }
  for (const PipeTimes t : {PipeTimes{1, 1.5, 0.5}, PipeTimes{1, 2, 1}, PipeTimes{1, 1, 1}})
    for (const int M : {8, 16, 32}) {
      const Schedule s = zbv_schedule(8, M, t);
      EXPECT_GE(validate(s, t).bubble, *bubble_formula(s, t) - 1e-12) << "M=" << M;
    }
}

// With fewer micro-batches than stages the W's are too few to fill the waits:
// at P = 4, M = 2 and equal times ZB-H1 plays 20 idle slots of 44 (45.5%),
// where its formula would give 3 of 9 (33.3%). Neither zero-bubble schedule
// claims a formula there; 1F1B's (P-1)/(M+P-1) still holds.
TEST(PipelineSchedule, ZeroBubbleFormulasNeedAMicroBatchPerStage) {
  EXPECT_NEAR(validate(zb_h1_schedule(4, 2)).bubble, 20.0 / 44, 1e-12);
  EXPECT_EQ(bubble_formula(zb_h1_schedule(4, 2), {}), std::nullopt);
  EXPECT_EQ(bubble_formula(zbv_schedule(4, 3), {}), std::nullopt);
  EXPECT_NEAR(*bubble_formula(zb_h1_schedule(4, 4), {}), validate(zb_h1_schedule(4, 4)).bubble, 1e-12);
  const Schedule one_f_one_b = make_schedule("1f1b", 4, 2);
  EXPECT_NEAR(*bubble_formula(one_f_one_b, {}), validate(one_f_one_b).bubble, 1e-12);
}

TEST(PipelineSchedule, WhatEachScheduleKeepsInFlight) {
  const int P = 4, M = 8;
  const ScheduleRun gpipe = validate(gpipe_schedule(P, M)), ofob = validate(one_f_one_b_schedule(P, M));
  const ScheduleRun h1 = validate(zb_h1_schedule(P, M)), v = validate(zbv_schedule(P, M), per_chunk(2));
  for (int s = 0; s < P; ++s) {
    EXPECT_EQ(gpipe.peak_in_flight[std::size_t(s)], M) << "stage " << s;
    EXPECT_EQ(ofob.peak_in_flight[std::size_t(s)], P - s) << "stage " << s;
    EXPECT_EQ(h1.peak_in_flight[std::size_t(s)], P) << "stage " << s;  // 1F1B's first stage's, on every stage
    EXPECT_LE(v.peak_in_flight[std::size_t(s)], 2 * P) << "stage " << s;  // chunks of half a stage
  }
  EXPECT_EQ(validate(naive_schedule(P, M)).peak_in_flight[0], 1);
  // Megatron's interleaving keeps more: the first stage holds (V - 1) P + 2P - 1 chunks at most.
  EXPECT_EQ(validate(interleaved_schedule(P, M, 2)).peak_in_flight[0], P + 2 * P - 1);
}

TEST(PipelineSchedule, ChunksAndTheirStages) {
  const Schedule interleaved = interleaved_schedule(4, 8, 2);
  EXPECT_EQ(interleaved.stage_of_chunk, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  const Schedule v = zbv_schedule(4, 8);
  EXPECT_EQ(v.stage_of_chunk, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  // At the V's turn, chunks 3 and 4 share stage 3: nothing travels between them.
  for (const PipeAction& a : v.actions[3])
    EXPECT_FALSE((a.op == PipeOp::send_activation && a.chunk == 3) || (a.op == PipeOp::receive_activation && a.chunk == 4));
}

TEST(PipelineSchedule, ABrokenScheduleIsRefusedWithTheActionThatBreaksIt) {
  // Stage 0 waits for micro-batch 0's gradient before sending its activation: nobody can move.
  Schedule deadlock = one_f_one_b_schedule(2, 2);
  deadlock.actions[0] = {{PipeOp::forward, 0}, {PipeOp::receive_gradient, 0}, {PipeOp::send_activation, 0},
                         {PipeOp::forward, 1}, {PipeOp::send_activation, 1}, {PipeOp::receive_gradient, 1},
                         {PipeOp::backward, 0}, {PipeOp::backward, 1}};
  EXPECT_NE(error_of(deadlock).find("deadlock: every unfinished stage waits on a receive: stage 0 at action 1 "
                                    "(receive gradient of micro-batch 0), stage 1 at action 0 (receive activation"),
            std::string::npos) << error_of(deadlock);

  Schedule early = gpipe_schedule(2, 2);
  std::swap(early.actions[1][0], early.actions[1][2]);  // receives micro-batch 1 first, then forwards 0
  EXPECT_NE(error_of(early).find("stage 1, action 1 (forward of micro-batch 0): its activation has not been received"),
            std::string::npos) << error_of(early);

  Schedule missing = naive_schedule(1, 2);
  missing.actions[0].pop_back();  // micro-batch 1's backward
  EXPECT_NE(error_of(missing).find("stage 0 never runs the backward of micro-batch 1"), std::string::npos)
      << error_of(missing);
  // Across stages, a backward left out stalls its peer on the gradient it
  // would have sent: named as what is missing, where it was a deadlock.
  Schedule stalls = one_f_one_b_schedule(2, 2);
  std::erase_if(stalls.actions[0], [](const PipeAction& a) { return a.op == PipeOp::backward && a.microbatch == 1; });
  EXPECT_EQ(error_of(stalls), "1f1b schedule: stage 0 never runs the backward of micro-batch 1");

  Schedule unsplit = zb_h1_schedule(2, 2);
  for (PipeAction& a : unsplit.actions[0])
    if (a.op == PipeOp::backward_input && a.microbatch == 1) a.op = PipeOp::backward;  // then its weights' part again
  EXPECT_NE(error_of(unsplit).find("not right after a backward for the input alone"), std::string::npos)
      << error_of(unsplit);

  Schedule wrong_stage = interleaved_schedule(2, 2, 2);
  wrong_stage.actions[0][0].chunk = 1;
  EXPECT_NE(error_of(wrong_stage).find("chunk 1 runs on stage 1"), std::string::npos) << error_of(wrong_stage);

  EXPECT_THROW(make_schedule("zigzag", 4, 4), Error);
  EXPECT_THROW(make_schedule("interleaved", 4, 6, 2), Error);  // M not a multiple of P
  EXPECT_THROW(make_schedule("1f1b", 4, 4, 2), Error);
}

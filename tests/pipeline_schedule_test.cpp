// Pipeline schedules as data: each generated schedule passes the validator
// for many P and M, its bubble is the formula's, and its activations in flight
// are GPipe's M or 1F1B's P - s; broken schedules are refused with the action
// that breaks them.
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

}  // namespace

TEST(PipelineSchedule, EveryScheduleRunsForManyStagesAndMicrobatches) {
  for (const char* name : {"naive", "gpipe", "1f1b"})
    for (int P = 1; P <= 8; ++P)
      for (int M = 1; M <= 12; ++M) EXPECT_NO_THROW(validate(make_schedule(name, P, M))) << name << " P=" << P << " M=" << M;
}

// With a backward twice a forward: naive (P-1)/P, GPipe and 1F1B (P-1)/(M+P-1).
TEST(PipelineSchedule, TheBubbleIsTheFormulas) {
  for (const int M : {4, 8, 32}) {
    const int P = 4;
    EXPECT_NEAR(validate(naive_schedule(P, M)).bubble, (P - 1.0) / P, 1e-12) << "M=" << M;
    EXPECT_NEAR(validate(gpipe_schedule(P, M)).bubble, (P - 1.0) / (M + P - 1), 1e-12) << "M=" << M;
    EXPECT_NEAR(validate(one_f_one_b_schedule(P, M)).bubble, (P - 1.0) / (M + P - 1), 1e-12) << "M=" << M;
  }
  EXPECT_NEAR(validate(gpipe_schedule(4, 4)).bubble, 3.0 / 7, 1e-12);  // the 42.9%
  EXPECT_DOUBLE_EQ(validate(gpipe_schedule(4, 4)).makespan, 7 * 3.0);  // (M + P - 1)(F + B)
}

TEST(PipelineSchedule, GpipeHoldsEveryMicrobatchAndOneFOneBAtMostPMinusS) {
  const int P = 4, M = 8;
  const ScheduleRun gpipe = validate(gpipe_schedule(P, M)), ofob = validate(one_f_one_b_schedule(P, M));
  for (int s = 0; s < P; ++s) {
    EXPECT_EQ(gpipe.peak_in_flight[std::size_t(s)], M) << "stage " << s;
    EXPECT_EQ(ofob.peak_in_flight[std::size_t(s)], P - s) << "stage " << s;
  }
  EXPECT_EQ(validate(naive_schedule(P, M)).peak_in_flight[0], 1);
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
  std::swap(early.actions[1][0], early.actions[1][1]);  // forward before its activation arrives
  EXPECT_NE(error_of(early).find("stage 1, action 0 (forward of micro-batch 0): its activation has not been received"),
            std::string::npos) << error_of(early);

  Schedule crossed = gpipe_schedule(2, 2);
  std::swap(crossed.actions[1][0], crossed.actions[1][2]);  // receives micro-batch 1 first
  EXPECT_NE(error_of(crossed).find("the previous stage's next message is micro-batch 0: receives must match sends"),
            std::string::npos) << error_of(crossed);

  Schedule missing = naive_schedule(1, 2);
  missing.actions[0].pop_back();  // micro-batch 1's backward
  EXPECT_NE(error_of(missing).find("stage 0 never runs the backward of micro-batch 1"), std::string::npos)
      << error_of(missing);

  EXPECT_THROW(make_schedule("zigzag", 4, 4), Error);
}

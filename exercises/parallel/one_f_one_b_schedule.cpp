// EXERCISE 8.1
// 1F1B (PipeDream-Flush, Narayanan et al. 2021): the schedule of most
// pipeline-parallel training. Stage s first runs the forwards that fill the
// pipe behind it, P - s - 1 of them (fewer if there are fewer micro-batches);
// then, for each micro-batch left, one forward and the backward of its
// oldest micro-batch; then the backwards left, in order. The last stage
// alternates from the start; the first holds P micro-batches at most, where
// GPipe holds all M; the bubble stays (P-1)/(M+P-1).
//
// add_forward(s, m, stage) and add_backward(s, m, stage) append stage's action on
// micro-batch m with the receive before it and the send after it (each stage is
// chunk `stage` of the model here). validate(s) plays a schedule out and says
// what breaks. Grade it: ./labkit grade pipeline; run the lab on it: ./labkit mine pipeline
#include <algorithm>

#include "labkit/parallel/pipeline_schedule.h"

namespace labkit {

Schedule one_f_one_b_schedule(int stages, int microbatches) {
  Schedule s = empty_schedule("1f1b", stages, microbatches, 1, looped_placement(stages, 1));
  // TODO: on each stage: min(P - stage - 1, M) forwards; then each further micro-batch's
  //       forward, each followed by the backward of the oldest one not yet backwarded; then the backwards left.
  return s;
}

}  // namespace labkit

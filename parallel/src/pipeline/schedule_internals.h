// What the schedule generators (pipeline_schedule.cpp), the zero-bubble
// placement (zero_bubble.cpp), the replay behind validate()
// (schedule_replay.cpp) and the executor share, inside parallel/: where a
// chunk runs, whether a message travels between two chunks, and vectors
// subscripted by the ints that PipeAction and Schedule number stages, chunks
// and micro-batches with.
#pragma once

#include <cstddef>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "labkit/parallel/pipeline_schedule.h"

namespace labkit {

// A std::vector subscripted by ints, as a schedule numbers its stages, chunks and micro-batches.
template <typename T>
class IntVector {
 public:
  explicit IntVector(int size) : cells_(std::size_t(size)) {}
  IntVector(int size, const T& value) : cells_(std::size_t(size), value) {}
  T& operator[](int i) { return cells_[std::size_t(i)]; }
  const T& operator[](int i) const { return cells_[std::size_t(i)]; }
  auto begin() { return cells_.begin(); }
  auto end() { return cells_.end(); }
  auto begin() const { return cells_.begin(); }
  auto end() const { return cells_.end(); }

 private:
  std::vector<T> cells_;
};

// A table over a schedule's chunks and micro-batches: what each chunk has done
// with each micro-batch, or when.
template <typename T>
class Grid {
 public:
  Grid(int chunks, int microbatches, const T& value = T())
      : microbatches_(microbatches), cells_(chunks * microbatches, value) {}
  T& operator()(int chunk, int microbatch) { return cells_[chunk * microbatches_ + microbatch]; }
  const T& operator()(int chunk, int microbatch) const { return cells_[chunk * microbatches_ + microbatch]; }

 private:
  int microbatches_;
  IntVector<T> cells_;
};

inline int stage_of(const Schedule& s, int chunk) { return s.stage_of_chunk[std::size_t(chunk)]; }

// A message travels between two chunks only where they are on different stages.
inline bool crosses(const Schedule& s, int from_chunk, int to_chunk) {
  return stage_of(s, from_chunk) != stage_of(s, to_chunk);
}

// The action list of the stage that holds `chunk`.
inline std::vector<PipeAction>& actions_of(Schedule& s, int chunk) {
  return s.actions[std::size_t(stage_of(s, chunk))];
}

inline constexpr double kNever = std::numeric_limits<double>::infinity();

// Where each micro-batch's last action on a stage is: the executor gives its
// activation set back to the pool after it, once the sends from it are done
// (received: a send completes when its receive is posted).
inline std::vector<std::size_t> last_actions(std::span<const PipeAction> actions, int microbatches) {
  std::vector<std::size_t> last(std::size_t(microbatches), 0);
  for (std::size_t i = 0; i < actions.size(); ++i) last[std::size_t(actions[i].microbatch)] = i;
  return last;
}

// The greedy placement of the zero-bubble schedules (zero_bubble.cpp): fills
// `empty` (from empty_schedule) with each chunk's forwards and split
// backwards, a stage keeping at most `limit` chunk activations, at times `t`.
Schedule zero_bubble(Schedule empty, int limit, const PipeTimes& t);

}  // namespace labkit

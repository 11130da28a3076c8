// labkit::Comm on the simulated backend: a thin handle that turns each call
// into a request to the engine, naming itself by global rank and group.
#pragma once

#include "engine.h"
#include "labkit/comm.h"

namespace labkit::sim {

class SimComm final : public Comm {
 public:
  SimComm(Engine& engine, int comm_id, int rank, Members members, TraceTrack* track)
      : Comm(comm_id, rank, members, track), engine_(engine), comm_id_(comm_id), me_((*members)[rank]) {}

  double now() const override { return engine_.now(me_); }

 protected:
  std::int64_t post_send(View buf, int to, int tag) override {
    return engine_.post(true, me_, global_rank(to), tag, comm_id_, buf);
  }
  std::int64_t post_recv(View buf, int from, int tag) override {
    return engine_.post(false, me_, global_rank(from), tag, comm_id_, buf);
  }
  void wait_request(std::int64_t id) override { engine_.wait(me_, id); }
  bool test_request(std::int64_t id) override { return engine_.test(me_, id); }
  void check_collective(const CollectiveCall& call) override {
    engine_.check_collective(me_, comm_id_, ++seq_, call, who());
  }
  std::string_view run_native(const CollectiveCall& call) override {
    return engine_.native(me_, comm_id_, seq_, call);
  }
  std::unique_ptr<Comm> split_group(int color, int key) override {
    Engine::Membership m = engine_.split(me_, comm_id_, ++split_seq_, color, key);
    if (m.comm_id < 0) return nullptr;
    return std::make_unique<SimComm>(engine_, m.comm_id, m.rank, std::move(m.members), track());
  }
  void advance(double seconds) override { engine_.advance(me_, seconds); }
  int node_of_global(int global_rank) const override { return engine_.options().topology.node_of(global_rank); }
  double seconds_for_flops(double flops) const override { return engine_.seconds_for_flops(me_, flops); }
  std::vector<std::vector<std::byte>> gather_untimed(View buf) override {
    return engine_.gather_untimed(me_, comm_id_, ++inspect_seq_, buf);
  }

 private:
  Engine& engine_;
  int comm_id_;
  int me_;  // global rank
  std::uint64_t seq_ = 0, split_seq_ = 0, inspect_seq_ = 0;
};

}  // namespace labkit::sim

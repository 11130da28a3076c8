// labkit::Comm on the simulated backend: a thin handle that turns each call
// into a request to the engine, naming itself by actor (the rank, or the
// rank's communication stream when `actor` is given) and group.
#pragma once

#include "engine.h"
#include "labkit/comm.h"

namespace labkit::sim {

class SimComm final : public Comm {
 public:
  SimComm(Engine& engine, int comm_id, int rank, Members members, TraceTrack* track, int actor = -1)
      : Comm(comm_id, rank, members, track), engine_(engine), comm_id_(comm_id), me_((*members)[rank]),
        actor_(actor < 0 ? me_ : actor) {
    if (actor >= 0) mark_as_stream();
  }
  ~SimComm() override { engine_.close_group(comm_id_); }

  double now() const override { return engine_.now(actor_); }

 protected:
  std::int64_t post_send(View buf, int to, int tag) override {
    return engine_.post(true, actor_, global_rank(to), tag, comm_id_, buf);
  }
  std::int64_t post_recv(View buf, int from, int tag) override {
    return engine_.post(false, actor_, global_rank(from), tag, comm_id_, buf);
  }
  void wait_request(std::int64_t id) override { engine_.wait(actor_, id); }
  bool test_request(std::int64_t id) override { return engine_.test(actor_, id); }
  void check_collective(const CollectiveCall& call) override {
    engine_.check_collective(actor_, comm_id_, ++seq_, call, who());
  }
  std::string_view run_native(const CollectiveCall& call) override {
    return wait_native(start_native(call)).algorithm;
  }
  // A native collective's id is its sequence number in the group.
  std::int64_t start_native(const CollectiveCall& call) override {
    engine_.start_native(actor_, comm_id_, seq_, call);
    return std::int64_t(seq_);
  }
  NativeDone wait_native(std::int64_t id) override { return engine_.wait_native(actor_, comm_id_, id); }
  bool test_native(std::int64_t id) override { return engine_.test_native(actor_, comm_id_, id); }
  std::int64_t start_algorithm(const CollectiveCall& call) override {
    return engine_.start_on_stream(actor_, comm_id_, call, algorithm_for(call.op), track());
  }
  void wait_algorithm(std::int64_t id) override { engine_.wait_stream(actor_, comm_id_, id); }
  bool test_algorithm(std::int64_t id) override { return engine_.test_stream(actor_, comm_id_, id); }
  std::unique_ptr<Comm> split_group(int color, int key) override {
    Engine::Membership m = engine_.split(actor_, comm_id_, ++split_seq_, color, key);
    if (m.comm_id < 0) return nullptr;
    return std::make_unique<SimComm>(engine_, m.comm_id, m.rank, std::move(m.members), track(),
                                     actor_ == me_ ? -1 : actor_);
  }
  void advance(double seconds) override { engine_.advance(actor_, seconds); }
  bool clock_is_virtual() const override { return true; }
  int node_of_global(int global_rank) const override { return engine_.options().topology.node_of(global_rank); }
  double seconds_for_flops(double flops) const override { return engine_.seconds_for_flops(actor_, flops); }
  std::vector<std::vector<std::byte>> gather_untimed(View buf) override {
    return engine_.gather_untimed(actor_, comm_id_, ++gather_seq_, buf);
  }

 private:
  Engine& engine_;
  int comm_id_;
  int me_;     // global rank
  int actor_;  // the engine's actor: me_, or my communication stream
  std::uint64_t seq_ = 0, split_seq_ = 0, gather_seq_ = 0;
};

}  // namespace labkit::sim

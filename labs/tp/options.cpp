// Lab 7: the option combinations that cannot be, refused before any rank
// starts: the options that belong to another view, and splits that do not
// divide, on the simulator's --ranks or mpirun's -np alike (the ranks check
// them again as they start: context_parallel.cpp, TensorParallelGpt's constructor).
#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/lab/training_options.h"
#include "labkit/parallel/tensor_parallel_gpt.h"
#include "tp.h"

namespace tp_lab {

namespace {

// The tiny GPT split over --ranks (--what-if has its tp counts of its own).
void check_tensor_parallel(const Options& o, const RunOptions& run_options, const GptConfig& config) {
  const int ranks = run_options.ranks;
  if (o.tp) throw Error("--tp goes with --cp; without it every rank is in the one tensor-parallel group: --ranks");
  if (o.seq && o.what_if.empty())
    throw Error("--seq goes with --cp or --what-if; the tensor-parallel GPT trains on its context of " +
                std::to_string(config.max_seq));
  if (!o.what_if.empty()) memory::what_if_seq(memory::model_preset(o.what_if), o.seq);
  if (o.what_if.empty()) lab::refuse_payload_free(run_options.payload_free, {"--cp", "--what-if"});
  if (!o.what_if.empty()) {  // the what-if sizes the model's layer, not the tiny GPT, on tp counts of its own
    lab::refuse_model_device_backend(o, run_options, "--what-if runs payload-free");
    if (run_options.ranks_given)
      throw Error(fmt::format("--ranks {}: --what-if does not read it: it times its layer at tp 2 to 16, inside a "
                              "node and across nodes, each on as many ranks", ranks));
    if (o.sp) throw Error("--sp: --what-if times Megatron's 4 allreduces a layer, without sequence parallelism");
    return;
  }
  if (const std::string no = tensor_parallel_refusal(architecture_of(config), ranks); !no.empty())
    throw Error(fmt::format("{} {}: {}", ranks_flag(run_options), ranks, no));
  if (o.sp && ranks == 1)  // as the memory lab refuses --sp at --tp 1
    throw Error(fmt::format("--sp: sequence parallelism splits the norms' and dropouts' activations over the "
                            "tensor-parallel ranks; with {} 1 there are none to split over", ranks_flag(run_options)));
  if (const std::string no = sequence_parallel_refusal(config.max_seq, ranks); o.sp && !no.empty())
    throw Error(fmt::format("--sp {} {}: {}", ranks_flag(run_options), ranks, no));
}

// What keeps `ranks` (the number `given_by` gives: --ranks, or mpirun's -np)
// from a dp x cp x tp mesh of the tiny GPT's attention, in the options' words, or "".
std::string mesh_refusal(const Options& o, int ranks, std::string_view given_by, const GptConfig& config) {
  if (o.cp > ranks) return fmt::format("--cp {} is more ranks than {} {}", o.cp, given_by, ranks);
  const int tp = o.tp ? o.tp : ranks / o.cp;
  if (std::int64_t(tp) * o.cp > ranks)
    return fmt::format("--tp {} x --cp {} = {} ranks, more than {} {}", tp, o.cp, tp * o.cp, given_by, ranks);
  if (ranks % (tp * o.cp) != 0)
    return fmt::format("{} {} is not a multiple of --tp {} x --cp {} = {} (the ranks beyond one tp x cp grid are "
                       "data-parallel copies of it)", given_by, ranks, tp, o.cp, tp * o.cp);
  if (const std::string no = tensor_parallel_refusal(architecture_of(config), tp); !no.empty())
    return fmt::format("--tp {}: {}", tp, no);
  if (const int dp = ranks / (tp * o.cp); o.batch % dp != 0)
    return fmt::format("--batch {}: the {} data-parallel copies ({} {} over tp {} x cp {}) each take an equal share "
                       "of it", o.batch, dp, given_by, ranks, tp, o.cp);
  return "";
}

// --cp: attention alone, over a dp x cp x tp mesh of the ranks.
void check_context_parallel(const Options& o, const RunOptions& run_options, const GptConfig& config) {
  const int ranks = run_options.ranks;
  if (o.sp || !o.what_if.empty())
    throw Error(fmt::format("--cp {} runs attention alone; {} belongs to the tensor-parallel GPT's run", o.cp,
                            o.sp ? "--sp" : "--what-if"));
  if (run_options.payload_free && o.device != "cpu")
    throw Error(fmt::format("--device {} with --payload-free: ring attention's payload-free run has no tensors to "
                            "place on a device", o.device));
  const int seq = o.seq ? o.seq : config.max_seq;
  if (seq % (2 * o.cp) != 0)
    throw Error(fmt::format("--cp {}: the zig-zag layout cuts the sequence into 2 x cp = {} chunks, two to a rank, and "
                            "a sequence of {} does not divide into them (--seq)", o.cp, 2 * o.cp, seq));
  if (!run_options.payload_free && seq > 4096)
    throw Error(fmt::format("--seq {}: dense attention to check against holds B x heads x {}^2 scores; above 4096 "
                            "add --payload-free", seq, seq));
  if (const std::string no = mesh_refusal(o, ranks, ranks_flag(run_options), config); !no.empty()) throw Error(no);
}

}  // namespace

void check_options(const Options& o, const RunOptions& run_options, const GptConfig& config) {
  if (o.cp)
    check_context_parallel(o, run_options, config);
  else
    check_tensor_parallel(o, run_options, config);
}

}  // namespace tp_lab

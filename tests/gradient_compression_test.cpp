// parallel/gradient_compression: the tiny GPT's tensors tile its buffer; each
// scheme's average against a closed form (bf16 within its rounding, PowerSGD
// at full rank exact, top-k the mean of each rank's k largest); error feedback
// keeps exactly what was not applied; and the bytes counted, the formula and
// the trace agree.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/gpt.h"
#include "labkit/parallel/gradient_compression.h"

using namespace labkit;
using labkit::test::simulate;

namespace {

// Rank r's gradient element i at step s: depends on all three, so a value
// averaged from the wrong rank, place or step shows.
float input(int step, int rank, std::size_t i) {
  return float(std::sin(0.37 * double(i) + 1.3 * rank + 0.71 * step) * (1 + 0.25 * rank) + 0.01 * double(i % 7));
}

struct Steps {
  std::vector<std::vector<std::vector<float>>> outputs;  // [step][rank]
  std::vector<std::vector<float>> errors;                // [rank], after the last step
  std::vector<std::uint64_t> sent, formula;              // [rank]
  std::uint64_t traced = 0;                              // rank 0's collectives, this rank's share
};

using MakeCompressor = std::function<std::unique_ptr<GradientCompressor>(Comm&)>;

// `steps` averages of input(step, rank, .) on `ranks` ranks.
Steps run_steps(int ranks, std::size_t count, int steps, const MakeCompressor& make) {
  Steps out{std::vector(steps, std::vector<std::vector<float>>(ranks)), std::vector<std::vector<float>>(ranks),
            std::vector<std::uint64_t>(ranks), std::vector<std::uint64_t>(ranks)};
  const auto run = simulate(ranks, [&](Comm& c) {
    const std::unique_ptr<GradientCompressor> compressor = make(c);
    for (int s = 0; s < steps; ++s) {
      std::vector<float> g(count);
      for (std::size_t i = 0; i < count; ++i) g[i] = input(s, c.rank(), i);
      compressor->average(view_of(g));
      out.outputs[s][c.rank()] = g;
    }
    out.errors[c.rank()] = compressor->error();
    out.sent[c.rank()] = compressor->bytes_sent();
    out.formula[c.rank()] = compressor->formula_bytes();
  });
  for (const TraceEvent& e : run.trace->tracks()[0].events)
    if (e.kind == TraceEvent::Kind::collective)  // an all_gather's event holds all P blocks
      out.traced += e.name == "all_gather" ? e.bytes / ranks : e.bytes;
  out.traced /= steps;
  return out;
}

double mean_input(int step, int ranks, std::size_t i) {
  double sum = 0;
  for (int r = 0; r < ranks; ++r) sum += input(step, r, i);
  return sum / ranks;
}

// Error feedback loses nothing: after S steps, what was applied plus the
// ranks' mean kept error is the mean of everything they computed.
void expect_nothing_lost(const Steps& run, int ranks, std::size_t count, const std::string& what) {
  const int steps = int(run.outputs.size());
  for (std::size_t i = 0; i < count; ++i) {
    double applied = 0, computed = 0, kept = 0;
    for (int s = 0; s < steps; ++s) applied += run.outputs[s][0][i], computed += mean_input(s, ranks, i);
    for (int r = 0; r < ranks; ++r) kept += run.errors[r][i] / ranks;
    ASSERT_NEAR(applied + kept, computed, 1e-4 * (1 + std::abs(computed)))
        << what << ", element " << i << ": applied " << applied << " + kept " << kept;
  }
}

void expect_every_rank_agrees(const Steps& run, const std::string& what) {
  for (std::size_t s = 0; s < run.outputs.size(); ++s)
    for (std::size_t r = 1; r < run.outputs[s].size(); ++r)
      ASSERT_EQ(run.outputs[s][r], run.outputs[s][0]) << what << ": rank " << r << " step " << s;
}

void expect_bytes_agree(const Steps& run, const std::string& what) {
  for (std::size_t r = 0; r < run.sent.size(); ++r)
    EXPECT_EQ(run.sent[r], run.formula[r]) << what << ": rank " << r << " counted against the formula";
  EXPECT_EQ(run.traced, run.sent[0]) << what << ": rank 0's trace against its count";
}

// A 6 x 4 and a 4 x 6 matrix around a vector of 5: PowerSGD's tensors.
const std::vector<ParameterTensor> kSmallModel = {
    {"tall", 0, 6, 4}, {"bias", 24, 1, 5}, {"wide", 29, 4, 6}};
constexpr std::size_t kSmallCount = 53;

}  // namespace

TEST(GptTensors, TileTheFlatBufferInGpt2Order) {
  const Gpt model(gpt_preset("tiny-gpt", 27), 1);
  const std::vector<ParameterTensor> tensors = model.tensors();
  ASSERT_EQ(tensors.size(), 2u + 12u * 2 + 2);  // wte, wpe; 12 per block; ln_f
  std::size_t end = 0;
  for (const ParameterTensor& t : tensors) {
    EXPECT_EQ(t.offset, end) << t.name << ": a gap or an overlap before it";
    end = t.offset + t.count();
  }
  EXPECT_EQ(end, model.parameter_count());
  EXPECT_EQ(tensors.front().name, "wte");
  EXPECT_EQ(tensors[2].name, "h.0.ln_1.weight");
  EXPECT_EQ(tensors.back().name, "ln_f.bias");
  // The names point at the right values: GPT-2's initialisation sets every
  // norm's gain to 1 and every bias to 0, and draws the weights at random.
  const std::vector<float> w = model.parameters().to_host();
  for (const ParameterTensor& t : tensors) {
    const auto first = w.begin() + std::ptrdiff_t(t.offset), last = first + std::ptrdiff_t(t.count());
    const bool gain = t.name.find("ln_") != std::string::npos && t.name.ends_with(".weight");
    const bool bias = t.name.ends_with(".bias");
    const std::ptrdiff_t ones = std::count(first, last, 1.0f), zeros = std::count(first, last, 0.0f);
    EXPECT_EQ(ones, gain ? std::ptrdiff_t(t.count()) : 0) << t.name;
    EXPECT_EQ(zeros, bias ? std::ptrdiff_t(t.count()) : 0) << t.name;
    if (t.name.ends_with("c_fc.weight")) {
      EXPECT_EQ(t.rows, 4 * t.cols) << t.name << " is (out, in)";
    }
  }
}

TEST(Compression, ParsesTheFourSchemesAndNamesWhatIsAllowed) {
  EXPECT_EQ(parse_compression("none").kind, Compression::none);
  EXPECT_EQ(parse_compression("bf16").kind, Compression::bf16);
  EXPECT_EQ(parse_compression("powersgd:4").rank, 4);
  EXPECT_EQ(parse_compression("topk:0.01").fraction, 0.01);
  EXPECT_EQ(name_of(parse_compression("topk:0.01")), "topk:0.01");
  EXPECT_EQ(name_of(parse_compression("powersgd:2")), "powersgd:2");
  for (const char* bad : {"", "fp16", "powersgd", "powersgd:0", "powersgd:-1", "powersgd:2x", "powersgd:1.5", "topk:0",
                          "topk:1.5", "topk:nan", "topk:", "bf16:2"}) {
    try {
      parse_compression(bad);
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("'{}' is not one of none, bf16, powersgd:R (R >= 1), topk:F (0 < F <= 1)", bad));
    }
  }
}

TEST(Compression, RefusesAPowerSgdRankLargerThanEveryMatrix) {
  const std::vector<ParameterTensor> tensors = Gpt(gpt_preset("tiny-gpt", 27), 1).tensors();
  EXPECT_NO_THROW(check_compression({.kind = Compression::powersgd, .rank = 64}, tensors, "the tiny GPT"));
  try {
    check_compression({.kind = Compression::powersgd, .rank = 65}, tensors, "the tiny GPT");
    ADD_FAILURE() << "rank 65 was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "rank 65 is larger than the matrices of the tiny GPT: the largest, "
                                     "h.0.mlp.c_fc.weight, is 256 x 64, so R <= min(256, 64) = 64");
  }
}

TEST(Bf16Compression, AveragesWithinBf16RoundingAndSendsHalfTheBytes) {
  for (int ranks : {1, 2, 3, 5}) {
    for (std::size_t count : {std::size_t(1), std::size_t(100), std::size_t(1003)}) {
      const Steps run = run_steps(ranks, count, 1, [&](Comm& c) { return std::make_unique<Bf16Compression>(c, count); });
      const std::string what = fmt::format("{} ranks, {} elements", ranks, count);
      expect_every_rank_agrees(run, what);
      expect_bytes_agree(run, what);
      EXPECT_EQ(run.sent[0], 2 * count) << what;
      for (std::size_t i = 0; i < count; ++i) {
        const float got = run.outputs[0][0][i];
        // Each of the P inputs, the P - 1 partial sums and the division rounds
        // to 8 bits: at most 2^-9 of the largest value each, after dividing by P.
        double largest = 0;
        for (int r = 0; r < ranks; ++r) largest = std::max(largest, double(std::abs(input(0, r, i))));
        ASSERT_NEAR(got, mean_input(0, ranks, i), (ranks + 1) * largest / 512) << what << ", element " << i;
        ASSERT_EQ(got, to_float(to_bf16(got))) << what << ", element " << i << " is not a bf16 value";
      }
    }
  }
}

// PyTorch's hook divides each rank's bf16 gradient by P before the sum: 0.1 on
// 3 ranks sends bf16(bf16(0.1) / 3) three times, which sum to 0.1005859375 in
// bf16; summing first and dividing the sum gave 0.10009765625.
TEST(Bf16Compression, DividesBeforeTheSumAsPyTorchsHookDoes) {
  simulate(3, [](Comm& c) {
    Bf16Compression bf16(c, 1);
    std::vector<float> g{0.1f};
    bf16.average(view_of(g));
    EXPECT_EQ(g[0], 0.1005859375f) << "rank " << c.rank();
  });
}

// A rank no matrix is worth (each would send more as factors) compresses
// nothing: one allreduce of the whole gradient, where PowerSGD's two rounds of
// factors ran empty and were charged their latency.
TEST(PowerSgd, ThatCompressesNoMatrixSendsOneAllReduce) {
  const auto run = simulate(2, [](Comm& c) {
    PowerSgd powersgd(c, kSmallModel, 4, 7, 1e9);  // a compression rate no matrix reaches
    std::vector<float> g(kSmallCount, 1.0f);
    powersgd.average(view_of(g));
    EXPECT_TRUE(powersgd.compressed().empty());
    EXPECT_EQ(g, std::vector<float>(kSmallCount, 1.0f));
  });
  int collectives = 0;
  for (const TraceEvent& e : run.trace->tracks()[0].events) collectives += e.kind == TraceEvent::Kind::collective;
  EXPECT_EQ(collectives, 1);
}

TEST(PowerSgd, AtFullRankIsTheExactMean) {
  for (int ranks : {1, 2, 3}) {
    // Rate 0: compress every matrix, though rank 4 saves nothing here.
    const Steps run = run_steps(ranks, kSmallCount, 2, [](Comm& c) {
      return std::make_unique<PowerSgd>(c, kSmallModel, 4, 7, 0.0);
    });
    for (int s = 0; s < 2; ++s)
      for (std::size_t i = 0; i < kSmallCount; ++i)
        ASSERT_NEAR(run.outputs[s][0][i], mean_input(s, ranks, i), 2e-5) << ranks << " ranks, step " << s << ", element " << i;
    expect_every_rank_agrees(run, "full rank");
    expect_bytes_agree(run, "full rank");
    // P and Q: 4 (6 + 4) twice, and the vector's 5: 85 floats.
    EXPECT_EQ(run.sent[0], 85u * 4);
  }
}

TEST(PowerSgd, BelowFullRankKeepsWhatItDidNotSend) {
  const int ranks = 3;
  const Steps run = run_steps(ranks, kSmallCount, 3, [](Comm& c) {
    return std::make_unique<PowerSgd>(c, kSmallModel, 1, 7, 0.0);
  });
  // Rank 1 drops part of each matrix: the first step's update is not the mean...
  double missed = 0;
  for (std::size_t i = 0; i < 24; ++i) missed = std::max(missed, std::abs(run.outputs[0][0][i] - mean_input(0, ranks, i)));
  EXPECT_GT(missed, 0.01);
  // ...but the vector is sent whole, and what the matrices did not send is kept.
  for (std::size_t i = 24; i < 29; ++i) EXPECT_NEAR(run.outputs[0][0][i], mean_input(0, ranks, i), 1e-6) << i;
  for (int r = 0; r < ranks; ++r)
    for (std::size_t i = 24; i < 29; ++i) EXPECT_EQ(run.errors[r][i], 0.0f) << "rank " << r << ", the vector";
  expect_nothing_lost(run, ranks, kSmallCount, "powersgd:1");
  expect_every_rank_agrees(run, "powersgd:1");
  expect_bytes_agree(run, "powersgd:1");
}

TEST(PowerSgd, OnTheTinyGptSendsRTimesMPlusNPerMatrix) {
  const std::vector<ParameterTensor> tensors = Gpt(gpt_preset("tiny-gpt", 64), 1).tensors();
  const std::size_t count = tensors.back().offset + tensors.back().count();
  const Steps run = run_steps(2, count, 1, [&](Comm& c) { return make_compressor(c, {.kind = Compression::powersgd, .rank = 2}, tensors, 1); });
  // Every matrix saves more than half at rank 2: wte 64 x 64, wpe 32 x 64 and per
  // block c_attn 192 x 64, c_proj 64 x 64, c_fc 256 x 64, mlp c_proj 64 x 256;
  // the 1,792 values of the biases and gains go whole.
  const std::uint64_t factors = 2 * ((64 + 64) + (32 + 64) + 2 * ((192 + 64) + (64 + 64) + (256 + 64) + (64 + 256)));
  EXPECT_EQ(run.sent[0], (factors + 1792) * 4);
  expect_bytes_agree(run, "powersgd:2");
  expect_every_rank_agrees(run, "powersgd:2");
}

TEST(TopK, SendsExactlyKEntriesAndKeepsTheRest) {
  const int ranks = 3;
  const std::size_t count = 101, k = 5;  // floor(0.05 x 101)
  const Steps run = run_steps(ranks, count, 1, [&](Comm& c) { return std::make_unique<TopK>(c, count, 0.05); });
  EXPECT_EQ(run.sent[0], k * 8);
  expect_bytes_agree(run, "topk:0.05");
  expect_every_rank_agrees(run, "topk:0.05");
  // The expected average: each rank's 5 largest |values|, summed and divided by P.
  std::vector<double> expected(count, 0.0);
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::size_t> order(count);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return std::abs(input(0, r, a)) > std::abs(input(0, r, b)); });
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t i = order[j];
      if (j < k) expected[i] += input(0, r, i) / ranks;
      EXPECT_EQ(run.errors[r][i], j < k ? 0.0f : input(0, r, i)) << "rank " << r << " element " << i;
    }
  }
  for (std::size_t i = 0; i < count; ++i) EXPECT_NEAR(run.outputs[0][0][i], expected[i], 1e-6) << "element " << i;
}

TEST(TopK, ErrorFeedbackSumsToWhatWasNotApplied) {
  for (int ranks : {1, 2, 4}) {
    const Steps run = run_steps(ranks, 64, 5, [](Comm& c) { return std::make_unique<TopK>(c, 64, 0.1); });
    expect_nothing_lost(run, ranks, 64, fmt::format("topk:0.1 on {} ranks", ranks));
    expect_bytes_agree(run, "topk:0.1");
  }
}

TEST(Compression, PayloadFreeIssuesTheSameCollectives) {
  const std::vector<ParameterTensor> tensors = Gpt(gpt_preset("tiny-gpt", 64), 1).tensors();
  const std::size_t count = tensors.back().offset + tensors.back().count();
  for (const char* spec : {"none", "bf16", "powersgd:2", "topk:0.01"}) {
    std::uint64_t sent = 0, formula = 0, traced = 0;
    const auto run = simulate(4, [&](Comm& c) {
      const auto compressor = make_compressor(c, parse_compression(spec), tensors, 1);
      compressor->average(meta_view(count, DType::f32));
      if (c.rank() == 0) sent = compressor->bytes_sent(), formula = compressor->formula_bytes();
    }, "dgx-h100", false);
    for (const TraceEvent& e : run.trace->tracks()[0].events)
      if (e.kind == TraceEvent::Kind::collective) traced += e.name == "all_gather" ? e.bytes / 4 : e.bytes;
    EXPECT_GT(sent, 0u) << spec;
    EXPECT_EQ(sent, formula) << spec;
    EXPECT_EQ(traced, sent) << spec;
  }
}

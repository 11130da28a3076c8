#include "grade_main.h"

#include <fstream>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace labkit::grade {

namespace {
struct Exercise {
  int passed = 0, total = 0;
  std::string feedback;  // the failure messages, in the learner's terms
};

// Collects each test's outcome under its suite (= exercise), in run order.
class Scorer : public ::testing::EmptyTestEventListener {
 public:
  std::vector<std::pair<std::string, Exercise>> exercises;

  void OnTestEnd(const ::testing::TestInfo& info) override {
    Exercise& e = find(info.test_suite_name());
    e.total++;
    if (info.result()->Passed()) {
      e.passed++;
      return;
    }
    e.feedback += fmt::format("{}:\n", info.name());
    for (int i = 0; i < info.result()->total_part_count(); ++i) {
      const ::testing::TestPartResult& part = info.result()->GetTestPartResult(i);
      if (part.failed()) e.feedback += fmt::format("  {}\n", part.message());
    }
  }

 private:
  Exercise& find(const std::string& name) {
    for (auto& [n, e] : exercises)
      if (n == name) return e;
    return exercises.emplace_back(name, Exercise{}).second;
  }
};
}  // namespace

int main(int argc, char** argv, double points) {
  std::string gradescope;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--gradescope") gradescope = argv[i + 1];
  ::testing::InitGoogleTest(&argc, argv);
  auto* scorer = new Scorer;  // the listener list owns it
  ::testing::UnitTest::GetInstance()->listeners().Append(scorer);
  const int status = RUN_ALL_TESTS();

  double total = 0, possible = 0;
  nlohmann::json tests = nlohmann::json::array();
  fmt::print("\n{:<38} {:>7} {:>11}\n", "exercise", "tests", "score");
  for (const auto& [name, e] : scorer->exercises) {
    const double score = e.total ? points * e.passed / e.total : 0;
    total += score;
    possible += points;
    fmt::print("{:<38} {:>3}/{:<3} {:>5.1f}/{:<5.0f}\n", name, e.passed, e.total, score, points);
    tests.push_back({{"name", name}, {"score", score}, {"max_score", points},
                     {"status", e.passed == e.total ? "passed" : "failed"},
                     {"output", e.feedback.empty() ? "all checks pass" : e.feedback}});
  }
  fmt::print("{:<38} {:>7} {:>5.1f}/{:<5.0f}\n", "total", "", total, possible);
  if (!gradescope.empty()) {
    std::ofstream out(gradescope);
    out << nlohmann::json{{"score", total}, {"tests", tests}}.dump(2) << '\n';
    if (!out) fmt::print(stderr, "grade: cannot write {}\n", gradescope);
  }
  return status;
}

}  // namespace labkit::grade

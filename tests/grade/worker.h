// What a grade binary runs as its main(). Each graded test runs in a process
// of its own, started by the grader (grader.cpp) as
//
//   grade_ring_allreduce.ring_all_reduce --gtest_filter=SUITE.TEST --report FILE --timeout S
//
// and the worker leaves a trail in FILE, one JSON object per line, so that the
// grader can tell what happened even when the learner's code takes the process
// down: the configuration being checked ({"config": ...}), whether the test
// checks a pattern ({"pattern": true}), and at the end the test's outcome
// ({"passed": ..., "messages": [...]}). A crash adds {"crash": SIGNAL, "rank":
// R}; a test still running after S seconds of CPU time (or kWallClockCap x S
// of the wall clock, for code that sleeps) adds {"timeout": "what every rank
// was doing"} and exits.
#pragma once

#include <string_view>

namespace labkit::sim {
class Engine;
}

namespace labkit::grade {

// The watchdog's wall-clock cap, in time limits: a machine busy with other work
// stretches a test's wall clock, not its CPU time, so the limit counts CPU.
constexpr double kWallClockCap = 10;

// The simulated run under way (null between runs): a crash or a timeout report
// says which rank was running and what every other rank was waiting in.
void watch(sim::Engine* engine);
// The configuration checked from now on ("P=4, count=5"): a crash or a timeout
// is reported with it.
void at_configuration(std::string_view label);
// This test checks how an exercise communicates: if it fails, the exercise
// earns nothing, whatever its values (see grader.cpp).
void mark_pattern_test();

// Runs the tests named by --gtest_filter and reports as above.
int main(int argc, char** argv);

}  // namespace labkit::grade

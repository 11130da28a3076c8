// The grader's main(): runs the grade tests, then prints a score per exercise
// (each gtest suite is one exercise, each of its tests an equal share) and, with
// --gradescope FILE, writes Gradescope's results.json
// (https://gradescope-autograders.readthedocs.io/en/latest/specs/).
#pragma once

#include <string>

namespace labkit::grade {

// Points each exercise is worth; the suite name is the exercise's function name.
int main(int argc, char** argv, double points_per_exercise = 10);

}  // namespace labkit::grade

// Whose code a lab executable runs, apart from main.h so that the file every
// executable compiles with its own definitions (labs/lib/src/this_lab.cpp)
// includes nothing heavier than this.
#pragma once

namespace labkit::lab {

// labs/NAME links the reference solutions, labs/mine/NAME (./labkit mine NAME)
// the learner's exercises/.
struct Code {
  const char* lab;        // for "./labkit mine LAB"
  const char* exercises;  // the lab's own, "unshard, zero_step, gather_compute_free"; empty where it has none
  bool yours;
};
extern const Code this_executables_code;  // one per executable (labs/lib/src/this_lab.cpp)

}  // namespace labkit::lab

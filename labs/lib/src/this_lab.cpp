// Whose code this executable runs. Every lab executable compiles this file with
// its own definitions (labkit_lab_code, labs/lib/CMakeLists.txt): labs/NAME
// links the reference solutions, labs/mine/NAME the learner's exercises/.
#include "labkit/lab/this_lab.h"

const labkit::lab::Code labkit::lab::this_executables_code{LABKIT_LAB, LABKIT_LAB_EXERCISES, LABKIT_LAB_YOURS};

# Fails while the learner's starting file (EXERCISE, exercises/LAYER/NAME.cpp) is not
# the stub cut from its solution's markers (STUB, in the build tree), and shows
# the difference. -DSTUB -DEXERCISE
file(READ ${STUB} stub)
if(EXISTS ${EXERCISE})
  file(READ ${EXERCISE} exercise)
else()
  set(exercise "")
endif()
if(NOT exercise STREQUAL stub)
  execute_process(COMMAND diff -u ${STUB} ${EXERCISE})
  message(FATAL_ERROR "${EXERCISE} is not the stub cut from its solution's markers (${STUB}). "
                      "After changing solutions/, run ./labkit exercises to write exercises/ again "
                      "(while you solve an exercise, your file differs, as it should).")
endif()

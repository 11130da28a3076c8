# An exercise that does not compile (grade/CMakeLists.txt): ninja builds it and fails, and the grader, given the
# build's log, must quote the compiler's errors, without its command line, in its report and in the Gradescope
# file (the learner's only view on Gradescope).
# -DGRADER -DNINJA -DCXX (the C++ compiler) -DOUT (a scratch directory)
file(REMOVE_RECURSE ${OUT})
file(WRITE ${OUT}/exercises/collectives/naive_all_reduce.cpp "void naive_all_reduce() { fold_into_rank_zero(); }\n")
file(WRITE ${OUT}/build.ninja "rule cxx\n  command = ${CXX} -c $in -o $out\n"
                              "build exercises/collectives/naive_all_reduce.cpp.o: "
                              "cxx exercises/collectives/naive_all_reduce.cpp\n")
execute_process(COMMAND ${NINJA} WORKING_DIRECTORY ${OUT} OUTPUT_FILE ${OUT}/build.log ERROR_FILE ${OUT}/build.log)
file(WRITE ${OUT}/manifest.json
     "[{\"lab\": \"collectives\", \"exercise\": \"naive_all_reduce\", \"binary\": \"${OUT}/missing\"}]\n")
execute_process(COMMAND ${GRADER} --manifest ${OUT}/manifest.json --build-log ${OUT}/build.log
                                  --gradescope ${OUT}/results.json
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT status EQUAL 1)
  message(FATAL_ERROR "expected the grader to exit 1 (a test failing), got ${status}")
endif()
file(READ ${OUT}/results.json results)
string(JSON output GET "${results}" tests 0 output)
foreach(words "does not compile; the compiler's first errors"
              "naive_all_reduce.cpp:1:[0-9]+: error: .*fold_into_rank_zero")
  if(NOT output MATCHES "${words}" OR NOT out MATCHES "${words}")
    message(FATAL_ERROR "the learner is not told, on Gradescope and in the report: ${words}\n${output}")
  endif()
endforeach()
if(output MATCHES " -c ")
  message(FATAL_ERROR "the compiler's command line is quoted:\n${output}")
endif()

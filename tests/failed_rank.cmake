# A rank failed on the simulator: the lab exits 1, names each rank that
# waited on it and what it waited in, and the trace it still writes marks the failure.
execute_process(COMMAND ${LAB} --op all_reduce --ranks 4 --algo ring --fail-rank 2 --at 1.5us --trace ${OUT}/failed.json
                RESULT_VARIABLE status ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT status STREQUAL "1")
  message(FATAL_ERROR "the run with a failed rank exited ${status}, not 1")
endif()
if(NOT err MATCHES "rank 1: send\\(to=2, tag=0, 4 bytes\\): rank 2 failed at t = 1.50 us")
  message(FATAL_ERROR "no error naming rank 1, its send and rank 2 in:\n${err}")
endif()
file(READ ${OUT}/failed.json trace)
if(NOT trace MATCHES "\"cat\":\"fault\",\"name\":\"failed\",\"ph\":\"i\"[^}]*\"tid\":2")
  message(FATAL_ERROR "the trace has no failure on rank 2's track")
endif()
# A rank the run does not have is refused before any rank starts.
execute_process(COMMAND ${LAB} --ranks 4 --fail-rank 4 --at 1us RESULT_VARIABLE status ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT status STREQUAL "1" OR NOT err STREQUAL "error: --fail-rank 4: there is no rank 4 among 4 ranks\n")
  message(FATAL_ERROR "--fail-rank 4 of 4 ranks was not refused on one line (exit ${status}): ${err}")
endif()

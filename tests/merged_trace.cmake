# Runs a ring allreduce under mpirun with --trace and checks the merged trace:
# every rank has a track with events, and trace_check (CHECK) passes it: spans
# nest on each track, every send's flow arrow has its receive end, and no arrow
# runs backwards in time (the ranks' clocks are aligned).
execute_process(COMMAND ${MPIEXEC} -np ${NP} --oversubscribe ${LAB} --backend mpi --op all_reduce --algo ring
                        --trace ${OUT}/merged_trace_${NP}.json
                OUTPUT_QUIET RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the run under mpirun failed with ${status}")
endif()
file(READ ${OUT}/merged_trace_${NP}.json trace)
string(JSON events GET "${trace}" traceEvents)
string(JSON n LENGTH "${events}")
math(EXPR last "${n} - 1")
set(tracks)
set(sends 0)
foreach(i RANGE ${last})
  string(JSON ph GET "${events}" ${i} ph)
  if(ph STREQUAL "B")  # a span begins
    string(JSON tid GET "${events}" ${i} tid)
    list(APPEND tracks ${tid})
  elseif(ph STREQUAL "s")
    math(EXPR sends "${sends} + 1")
  endif()
endforeach()
list(REMOVE_DUPLICATES tracks)
list(LENGTH tracks track_count)
if(NOT track_count EQUAL NP OR sends EQUAL 0)
  message(FATAL_ERROR "events on ${track_count} tracks, not ${NP}: ${tracks}; ${sends} messages")
endif()
execute_process(COMMAND ${CHECK} ${OUT}/merged_trace_${NP}.json RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the merged trace fails trace_check")
endif()

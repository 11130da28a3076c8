# Runs one command of the tour (COMMAND: a lab and its arguments, as labkit_lab's
# TOUR gives it to ./labkit) with the labs of this build (LABS) in OUT, then
# trace_check (CHECK) on the trace it wrote, or on each row's where the lab runs
# once per row of its table (out/ddp.trace.json: out/ddp.naive.trace.json, ...);
# with ROWS, it must have written that many.
separate_arguments(args UNIX_COMMAND "${COMMAND}")
list(POP_FRONT args lab)
string(REGEX MATCH "--trace ([^ ]+)" _ "${COMMAND}")
set(trace ${CMAKE_MATCH_1})
string(REGEX MATCH "^([^.]*)(\\..*)?$" _ "${trace}")
set(traces_pattern ${OUT}/${trace} "${OUT}/${CMAKE_MATCH_1}.*${CMAKE_MATCH_2}")
file(GLOB earlier ${traces_pattern})
if(earlier)
  file(REMOVE ${earlier})  # an earlier run's, which this one need not write again
endif()
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${LABS}/${lab} ${args} WORKING_DIRECTORY ${OUT} OUTPUT_QUIET RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${COMMAND}: exit status ${status}")
endif()
file(GLOB traces RELATIVE ${OUT} ${traces_pattern})
if(NOT traces)
  message(FATAL_ERROR "${COMMAND}: wrote no ${trace}, nor a trace per row")
endif()
list(LENGTH traces written)
if(DEFINED ROWS AND NOT written EQUAL ROWS)
  message(FATAL_ERROR "${COMMAND}: wrote ${traces}, not a trace for each of ${ROWS} rows")
endif()
execute_process(COMMAND ${CHECK} ${traces} WORKING_DIRECTORY ${OUT} RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${traces}, written by ${COMMAND}, fail trace_check")
endif()

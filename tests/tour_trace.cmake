# Runs one command of the tour (COMMAND: a lab and its arguments, as labkit_lab's
# TOUR gives it to ./labkit) with the labs of this build (LABS) in OUT, then
# trace_check (CHECK) on the trace it wrote.
separate_arguments(args UNIX_COMMAND "${COMMAND}")
list(POP_FRONT args lab)
string(REGEX MATCH "--trace ([^ ]+)" _ "${COMMAND}")
set(trace ${CMAKE_MATCH_1})
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${LABS}/${lab} ${args} WORKING_DIRECTORY ${OUT} OUTPUT_QUIET RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${COMMAND}: exit status ${status}")
endif()
execute_process(COMMAND ${CHECK} ${trace} WORKING_DIRECTORY ${OUT} RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${trace}, written by ${COMMAND}, fails trace_check")
endif()

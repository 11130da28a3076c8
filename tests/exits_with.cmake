# A run's verdict, by its exit status and its words: runs PROGRAM with ARGS (a
# list) and fails unless it exits with STATUS and its output (standard output and
# error together) matches MATCH and, where REFUSED is given, does not match it;
# where WRITES is given, the run must write that file (removed before it).
if(NOT "${WRITES}" STREQUAL "")
  file(REMOVE ${WRITES})
endif()
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT status STREQUAL "${STATUS}")
  message(FATAL_ERROR "exit status ${status}, not ${STATUS}:\n${out}")
endif()
if(NOT out MATCHES "${MATCH}")
  message(FATAL_ERROR "the output does not say '${MATCH}':\n${out}")
endif()
if(NOT REFUSED STREQUAL "" AND out MATCHES "${REFUSED}")
  message(FATAL_ERROR "the output says '${REFUSED}':\n${out}")
endif()
if(NOT "${WRITES}" STREQUAL "" AND NOT EXISTS "${WRITES}")
  message(FATAL_ERROR "it did not write ${WRITES}:\n${out}")
endif()

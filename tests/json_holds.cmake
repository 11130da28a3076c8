# Runs LAB ARGS --json and fails unless the JSON holds VALUE at PATH (keys and
# indices, ;-separated, as string(JSON GET) takes them): what a lab prints is
# in its --json, where a script reads it.
separate_arguments(args UNIX_COMMAND "${ARGS}")
set(json ${OUT}/${NAME}.json)
file(REMOVE ${json})
execute_process(COMMAND ${LAB} ${args} --json ${json} OUTPUT_QUIET ERROR_VARIABLE errors RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${LAB} ${ARGS} exited with ${status}:\n${errors}")
endif()
file(READ ${json} text)
string(JSON found ERROR_VARIABLE missing GET "${text}" ${PATH})
if(missing)
  message(FATAL_ERROR "${json}: nothing at ${PATH} (${missing})")
endif()
if(NOT found STREQUAL VALUE)
  message(FATAL_ERROR "${json}: ${PATH} is ${found}, not ${VALUE}")
endif()
message(STATUS "${PATH}: ${found}")

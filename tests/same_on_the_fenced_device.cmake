# Runs LAB ARGS on the CPU and again with --device fenced, each writing --json,
# and fails unless the two agree: the fence changes where host code may read,
# not what is computed (the same kernels in the same order). On the simulator
# the files must be the same byte for byte (every loss, virtual time and
# fingerprint); under mpirun, where times are real, each row's KEYS (a list).
separate_arguments(args UNIX_COMMAND "${ARGS}")
foreach(device cpu fenced)
  set(json ${OUT}/${NAME}_${device}.json)
  execute_process(COMMAND ${LAB} ${args} --device ${device} --json ${json} OUTPUT_QUIET ERROR_VARIABLE errors
                  RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${LAB} ${ARGS} --device ${device} exited with ${status}:\n${errors}")
  endif()
  file(READ ${json} json_${device})
endforeach()
set(cpu ${OUT}/${NAME}_cpu.json)
set(fenced ${OUT}/${NAME}_fenced.json)
if(NOT KEYS)
  if(NOT json_cpu STREQUAL json_fenced)
    message(FATAL_ERROR "--device fenced wrote other results than --device cpu: diff ${cpu} ${fenced}")
  endif()
  message(STATUS "the same results, byte for byte, on the CPU and on the fenced device")
  return()
endif()
# A table's JSON is an array of rows, or an object with the rows under ROWS; a
# lab's report of one run, one object.
if(ROWS)
  string(JSON json_cpu GET "${json_cpu}" ${ROWS})
  string(JSON json_fenced GET "${json_fenced}" ${ROWS})
endif()
string(JSON top TYPE "${json_cpu}")
if(top STREQUAL "OBJECT")
  set(json_cpu "[${json_cpu}]")
  set(json_fenced "[${json_fenced}]")
endif()
string(JSON rows LENGTH "${json_cpu}")
math(EXPR last "${rows} - 1")
foreach(row RANGE ${last})
  foreach(key ${KEYS})
    string(JSON on_cpu GET "${json_cpu}" ${row} ${key})
    string(JSON on_fenced GET "${json_fenced}" ${row} ${key})
    if(NOT on_cpu STREQUAL on_fenced)
      message(FATAL_ERROR "row ${row}'s ${key}: ${on_cpu} on the CPU, ${on_fenced} on the fenced device "
                          "(${cpu}, ${fenced})")
    endif()
  endforeach()
endforeach()
message(STATUS "the same ${KEYS} in all ${rows} rows on the CPU and on the fenced device")

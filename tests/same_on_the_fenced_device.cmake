# Runs LAB ARGS on the CPU and again with --device fenced, each writing --json,
# and fails unless the two files are the same byte for byte: the fence changes
# where host code may read, not what is computed (the same kernels in the same
# order), so every loss, time and fingerprint must come out identical.
separate_arguments(args UNIX_COMMAND "${ARGS}")
foreach(device cpu fenced)
  set(json ${OUT}/${NAME}_${device}.json)
  execute_process(COMMAND ${LAB} ${args} --device ${device} --json ${json} OUTPUT_QUIET ERROR_VARIABLE errors
                  RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${LAB} ${ARGS} --device ${device} exited with ${status}:\n${errors}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/${NAME}_cpu.json ${OUT}/${NAME}_fenced.json
                RESULT_VARIABLE differ)
if(differ)
  message(FATAL_ERROR "--device fenced wrote other results than --device cpu: diff ${OUT}/${NAME}_cpu.json "
                      "${OUT}/${NAME}_fenced.json")
endif()
message(STATUS "the same results, byte for byte, on the CPU and on the fenced device")

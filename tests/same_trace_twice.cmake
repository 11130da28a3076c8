# Runs a lab twice with the same arguments and fails unless the traces are byte-identical.
foreach(i 1 2)
  execute_process(COMMAND ${LAB} --op all --ranks 6 --algo ring --trace ${OUT}/determinism_${i}.json
                  OUTPUT_QUIET RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "run ${i} of ${LAB} failed with ${status}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/determinism_1.json ${OUT}/determinism_2.json
                RESULT_VARIABLE differ)
if(differ)
  message(FATAL_ERROR "the two traces differ: the simulator is not deterministic")
endif()

# labkit-viz --headless under xvfb-run, then the screenshot's checks.
file(REMOVE ${OUT})
execute_process(COMMAND xvfb-run -a ${VIZ} --headless --scenario ring:${RANKS}:1M --frames 3 --screenshot ${OUT}
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "labkit-viz --headless failed with ${status}")
endif()
execute_process(COMMAND ${CHECK} ${OUT} ${RANKS} RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the screenshot ${OUT} does not show ${RANKS} rank nodes")
endif()

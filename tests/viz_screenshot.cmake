# labkit-viz --headless on SCENARIO (default ring:RANKS:1M) under xvfb-run,
# then the screenshot's checks: it shows RANKS rank nodes, and where PANELS is
# given, the frame it shot drew exactly those panels (the headless run lists them).
if(NOT SCENARIO)
  set(SCENARIO ring:${RANKS}:1M)
endif()
file(REMOVE ${OUT})
execute_process(COMMAND xvfb-run -a ${VIZ} --headless --scenario ${SCENARIO} --frames 3 --screenshot ${OUT}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "labkit-viz --headless --scenario ${SCENARIO} failed with ${status}:\n${out}")
endif()
if(PANELS AND NOT out MATCHES "\npanels: ${PANELS}\n")
  message(FATAL_ERROR "--scenario ${SCENARIO} should draw the panels ${PANELS}:\n${out}")
endif()
execute_process(COMMAND ${CHECK} ${OUT} ${RANKS} RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the screenshot ${OUT} does not show ${RANKS} rank nodes")
endif()

# labkit-viz --headless on SCENARIO under xvfb-run: the frame it screenshots
# draws exactly the PANELS that apply to it (what the headless run lists), and
# the screenshot shows its RANKS rank nodes.
file(REMOVE ${OUT})
execute_process(COMMAND xvfb-run -a ${VIZ} --headless --scenario ${SCENARIO} --frames 3 --screenshot ${OUT}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "labkit-viz --headless --scenario ${SCENARIO} failed with ${status}:\n${out}")
endif()
if(NOT out MATCHES "\npanels: ${PANELS}\n")
  message(FATAL_ERROR "--scenario ${SCENARIO} should draw the panels ${PANELS}:\n${out}")
endif()
execute_process(COMMAND ${CHECK} ${OUT} ${RANKS} RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the screenshot ${OUT} does not show ${RANKS} rank nodes")
endif()

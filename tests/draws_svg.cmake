# A lab's --plot writes an SVG figure: runs LAB with ARGS and --plot OUT, and
# checks the figure names every curve in EXPECT (both ;-separated lists).
file(REMOVE ${OUT})
execute_process(COMMAND ${LAB} ${ARGS} --plot ${OUT} OUTPUT_QUIET RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${LAB} ${ARGS} --plot failed with ${status}")
endif()
file(READ ${OUT} svg)
foreach(text "<svg" ${EXPECT})
  string(FIND "${svg}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${OUT} does not contain '${text}'")
  endif()
endforeach()

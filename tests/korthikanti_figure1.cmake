# Korthikanti et al.'s (2022) Figure 1 from the memory lab: runs LAB with ARGS
# and --sweep recompute --json, and fails unless the layers' model state, the
# activations without recomputation and with sequence parallelism and
# selective recomputation are each within 1% of STATE, NONE and PRESENT
# (hundredths of a GiB, as the figure prints them: 45.56 GiB is 4556).
set(json ${OUT}/korthikanti_figure1_${NAME}.json)
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${LAB} ${args} --sweep recompute --json ${json} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "memory ${ARGS} failed (${status}):\n${out}")
endif()
file(READ ${json} report)
string(JSON state GET "${report}" sweep layers_model_state_bytes)
string(JSON none GET "${report}" sweep activations 0 activations)
string(JSON present GET "${report}" sweep activations 2 activations)
include(${CMAKE_CURRENT_LIST_DIR}/within.cmake)
set(failed "")
foreach(term "state ${state} ${STATE}" "none ${none} ${NONE}" "present ${present} ${PRESENT}")
  string(REPLACE " " ";" term "${term}")
  list(GET term 0 what)
  list(GET term 1 bytes)
  string(REGEX REPLACE "\\..*" "" bytes "${bytes}")
  math(EXPR centi_gib "100 * ${bytes} / 1073741824")  # hundredths of a GiB, as the figure prints them
  list(GET term 2 figure)
  within(${what} ${centi_gib} ${figure} 10)
endforeach()
if(failed)
  message(FATAL_ERROR "memory ${ARGS}: off Figure 1 by more than 1% in${failed}")
endif()

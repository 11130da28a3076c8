# Train 40 steps, checkpointing every 10, three ways: straight through; stopped
# at 8 us of virtual time (in step 24, after the step-20 checkpoint); resumed
# from that checkpoint. The resumed run must end with the straight run's
# checkpoint byte for byte, and print its losses from step 20 on.
set(args --steps 40 --print-every 5 --checkpoint-every 10)
execute_process(COMMAND ${LAB} ${args} --checkpoint ${OUT}/straight.ckpt OUTPUT_VARIABLE straight RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the straight run failed (${status})")
endif()
file(REMOVE ${OUT}/resumed.ckpt)
execute_process(COMMAND ${LAB} ${args} --checkpoint ${OUT}/resumed.ckpt --fail-rank 0 --at 8us
                OUTPUT_VARIABLE stopped ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status STREQUAL "1" OR NOT err MATCHES "rank 0 failed at t = 8.00 us" OR NOT stopped MATCHES "step +20/40"
   OR stopped MATCHES "step +25/40")
  message(FATAL_ERROR "the run did not stop between steps 20 and 25 (exit ${status}):\n${stopped}${err}")
endif()
execute_process(COMMAND ${LAB} ${args} --checkpoint ${OUT}/resumed.ckpt --resume OUTPUT_VARIABLE resumed
                RESULT_VARIABLE status)
if(NOT status EQUAL 0 OR NOT resumed MATCHES "resumed from [^\n]*resumed.ckpt at step 20")
  message(FATAL_ERROR "the resumed run failed (${status}):\n${resumed}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/straight.ckpt ${OUT}/resumed.ckpt RESULT_VARIABLE differ)
string(REGEX MATCHALL "step +(2[05]|3[05]|40)/40[^\n]*" straight_losses "${straight}")
string(REGEX MATCHALL "step +(2[05]|3[05]|40)/40[^\n]*" resumed_losses "${resumed}")
if(differ OR NOT straight_losses STREQUAL resumed_losses OR NOT straight_losses)
  message(FATAL_ERROR "the resumed run ended elsewhere:\n${straight_losses}\nagainst\n${resumed_losses}")
endif()
# What cannot be resumed is refused in one line.
execute_process(COMMAND ${LAB} --resume --checkpoint ${OUT}/missing.ckpt ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status STREQUAL "1" OR NOT err MATCHES "error: checkpoint '[^']*missing.ckpt': cannot open it\n$")
  message(FATAL_ERROR "a missing checkpoint was not refused clearly (exit ${status}): ${err}")
endif()
execute_process(COMMAND ${LAB} --checkpoint-every 0 ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status STREQUAL "105" OR NOT err MATCHES "^error: --checkpoint-every: 0 is out of range")
  message(FATAL_ERROR "--checkpoint-every 0 was not refused (exit ${status}): ${err}")
endif()

# Runs a NCCL check when this machine has a GPU; otherwise says so, which CTest
# reports as skipped ("no GPU here"). With LAB: the collectives lab on NCCL at
# NP ranks against the simulator; with BENCH: nccl-tests' table at one rank.
execute_process(COMMAND nvidia-smi -L RESULT_VARIABLE no_gpu OUTPUT_QUIET ERROR_QUIET)
if(no_gpu)
  message("no GPU here: the NCCL backend was built but not run")
  return()
endif()
if(BENCH)
  execute_process(COMMAND ${MPIEXEC} -np 1 ${BENCH} all_reduce --backend nccl -b 1K -e 64M -f 64 -n 5 -w 2
                  RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "the NCCL benchmark failed with ${status}")
  endif()
else()
  include(${CMAKE_CURRENT_LIST_DIR}/same_results_as_sim.cmake)
endif()

# Runs the pipeline lab with SCHEDULE on NP stages on the simulator and under
# mpirun, the same batches on both, and checks that the loss curves agree to
# five digits and that each stage held the same micro-batches at once.
include(${CMAKE_CURRENT_LIST_DIR}/mpi_vs_sim.cmake)
run_sim_and_mpi(pipeline_${SCHEDULE} --stages ${NP} --schedule ${SCHEDULE} --steps 3)
same_losses()
string(JSON steps LENGTH "${json_sim}" losses)
math(EXPR last_stage "${NP} - 1")
foreach(stage RANGE ${last_stage})
  string(JSON sim GET "${json_sim}" per_stage ${stage} in_flight)
  string(JSON mpi GET "${json_mpi}" per_stage ${stage} in_flight)
  if(NOT sim EQUAL mpi)
    message(FATAL_ERROR "stage ${stage}: ${sim} micro-batches in flight on the simulator, ${mpi} under mpirun -np ${NP}")
  endif()
endforeach()
message(STATUS "the same ${steps} losses and micro-batches in flight on both backends")

# Runs the tp lab (ARGS: --sp or nothing) on the simulator and under mpirun
# with NP processes, the same batches on both, and checks that the loss curves
# agree to five digits (the row-parallel sums may run in another order) and
# that rank 0 sent the same bytes per layer, read from each backend's trace.
include(${CMAKE_CURRENT_LIST_DIR}/mpi_vs_sim.cmake)
run_sim_and_mpi(tp${ARGS} --steps 4 ${ARGS})
string(JSON sent_sim GET "${json_sim}" sent_bytes_per_layer)
string(JSON sent_mpi GET "${json_mpi}" sent_bytes_per_layer)
if(NOT sent_sim EQUAL sent_mpi)
  message(FATAL_ERROR "sent per layer: ${sent_sim} bytes on the simulator, ${sent_mpi} under mpirun -np ${NP}")
endif()
same_losses()
string(JSON steps LENGTH "${json_sim}" losses)
message(STATUS "the same ${steps} losses and ${sent_sim} bytes per layer on both backends")

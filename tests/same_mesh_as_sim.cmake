# The collectives lab's --mesh view on the simulator and under mpirun with the
# same ranks: the printed rank-to-coordinates map and its JSON must be equal
# (each rank also checks that an all_reduce in each of its groups sums exactly
# the ranks the map lists, so the groups MPI_Comm_split built are the map's).
execute_process(COMMAND ${LAB} --mesh ${MESH} --json ${OUT}/mesh_sim_${NP}.json
                OUTPUT_VARIABLE sim RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the simulated run failed with ${status}")
endif()
execute_process(COMMAND ${MPIEXEC} -np ${NP} --oversubscribe ${LAB} --backend mpi --mesh ${MESH}
                        --json ${OUT}/mesh_mpi_${NP}.json
                OUTPUT_VARIABLE mpi RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the run under mpirun failed with ${status}")
endif()
if(NOT sim STREQUAL mpi)
  message(FATAL_ERROR "the simulator prints\n${sim}\nmpirun prints\n${mpi}")
endif()
file(READ ${OUT}/mesh_sim_${NP}.json sim_json)
file(READ ${OUT}/mesh_mpi_${NP}.json mpi_json)
if(NOT sim_json STREQUAL mpi_json)
  message(FATAL_ERROR "the JSON differs: the simulator's\n${sim_json}\nmpirun's\n${mpi_json}")
endif()
message(STATUS "the same map on both:\n${sim}")

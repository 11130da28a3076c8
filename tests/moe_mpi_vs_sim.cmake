# Runs the MoE lab with BALANCE on NP ranks (ep = NP) on the simulator and
# under mpirun, the same batches on both, with capacity tight enough to drop,
# and checks that the loss curves agree to five digits and that every layer
# kept the same assignments per expert at every step.
include(${CMAKE_CURRENT_LIST_DIR}/mpi_vs_sim.cmake)
run_sim_and_mpi(moe_${BALANCE} --ep ${NP} --balance ${BALANCE} --capacity-factor 1 --steps 3)
same_losses()
string(JSON steps LENGTH "${json_sim}" steps)
math(EXPR last "${steps} - 1")
foreach(s RANGE ${last})
  string(JSON layers LENGTH "${json_sim}" steps ${s} layers)
  math(EXPR last_layer "${layers} - 1")
  foreach(l RANGE ${last_layer})
    string(JSON sim GET "${json_sim}" steps ${s} layers ${l} kept)
    string(JSON mpi GET "${json_mpi}" steps ${s} layers ${l} kept)
    if(NOT sim STREQUAL mpi)
      message(FATAL_ERROR "step ${s}, layer ${l}: kept per expert ${sim} on the simulator, ${mpi} under mpirun -np ${NP}")
    endif()
  endforeach()
endforeach()
message(STATUS "the same ${steps} losses and assignments kept per expert on both backends")

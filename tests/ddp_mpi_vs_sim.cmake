# Runs the DDP lab on the simulator and under mpirun with NP processes, on the
# same batches, and checks that every mode's loss curve is the same to five
# digits: the ranks' sums may run in another order, nothing else may differ.
include(${CMAKE_CURRENT_LIST_DIR}/mpi_vs_sim.cmake)
run_sim_and_mpi(ddp --batch 24 --steps 4 --optimizer sgd)
string(JSON modes LENGTH "${json_sim}" modes)
math(EXPR last_mode "${modes} - 1")
foreach(i RANGE ${last_mode})
  string(JSON mode GET "${json_sim}" modes ${i} mode)
  string(JSON steps LENGTH "${json_sim}" modes ${i} loss)
  math(EXPR last_step "${steps} - 1")
  foreach(s RANGE ${last_step})
    string(JSON sim GET "${json_sim}" modes ${i} loss ${s})
    string(JSON mpi GET "${json_mpi}" modes ${i} loss ${s})
    same_loss(${sim} ${mpi} "${mode}, step ${s}")
  endforeach()
  message(STATUS "${mode}: the same ${steps} losses on both backends")
endforeach()

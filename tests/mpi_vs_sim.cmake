# What the labs' mpirun-against-simulator checks share (include() it):
#
# run_sim_and_mpi(NAME ARGS...): runs LAB with ARGS and --json on the
# simulator (--ranks NP) and under mpirun -np NP (--backend mpi), and sets
# json_sim and json_mpi to what each wrote.
# same_losses(): the same for every step of the two runs' "losses" curves.
# same_loss(SIM MPI WHAT): fails unless the two losses agree to five digits (the
# ranks' sums may run in another order; nothing else may differ).
function(run_sim_and_mpi name)
  foreach(backend sim mpi)
    set(json ${OUT}/${name}_${backend}_${NP}.json)
    set(command ${LAB} --backend ${backend} ${ARGN} --json ${json})
    if(backend STREQUAL mpi)
      set(command ${MPIEXEC} -np ${NP} --oversubscribe ${command})
    else()
      list(APPEND command --ranks ${NP})
    endif()
    execute_process(COMMAND ${command} OUTPUT_QUIET RESULT_VARIABLE status)
    if(NOT status EQUAL 0)
      message(FATAL_ERROR "${command} failed with ${status}")
    endif()
    file(READ ${json} text)
    set(json_${backend} "${text}" PARENT_SCOPE)
  endforeach()
endfunction()

# same_losses(): every step's loss in json_sim's and json_mpi's "losses" agrees (same_loss).
function(same_losses)
  string(JSON steps LENGTH "${json_sim}" losses)
  math(EXPR last "${steps} - 1")
  foreach(s RANGE ${last})
    string(JSON sim GET "${json_sim}" losses ${s})
    string(JSON mpi GET "${json_mpi}" losses ${s})
    same_loss(${sim} ${mpi} "step ${s}")
  endforeach()
endfunction()

function(same_loss sim mpi what)
  string(SUBSTRING "${sim}" 0 6 sim_digits)
  string(SUBSTRING "${mpi}" 0 6 mpi_digits)
  if(NOT sim_digits STREQUAL mpi_digits)
    message(FATAL_ERROR "${what}: loss ${sim} on the simulator, ${mpi} under mpirun -np ${NP}")
  endif()
endfunction()

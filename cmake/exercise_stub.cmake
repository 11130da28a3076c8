# Exercises are cut out of the solutions, so the two cannot drift apart. In
# solutions/LAYER/NAME.cpp, three kinds of comment line make the learner's stub:
#
#   // BEGIN EXERCISE: what to write      the learner's part starts; in the stub
#   //   (more comment lines go on)       "// TODO: what to write" and the comment
#                                         lines right after it stand in its place
#   // END EXERCISE                       the learner's part ends
#   // STUB: text                         "text" in the stub, wherever it stands:
#                                         a line of the stub's header, or the
#                                         (void)x; a stub needs to compile quietly
#
# Everything else outside the parts is the stub too: the doc comment, the
# signature, the phases' comments. A solution without BEGIN EXERCISE is no
# exercise. The stub keeps each marker line's indentation.
#
# include() it for labkit_exercise_stub(), or run it as a script to write every
# stub into exercises/LAYER/ (what ./labkit exercises does):
#   cmake -P cmake/exercise_stub.cmake

# labkit_exercise_stub(SOLUTION OUT): OUT is the stub cut out of the file
# SOLUTION, or empty when it marks no exercise. A marker out of place (an END
# without a BEGIN, a part left open) stops CMake with the file and line.
function(labkit_exercise_stub solution out)
  file(READ ${solution} rest)
  set(stub "")
  set(state outside)  # outside, todo (the comment lines of a BEGIN), inside
  set(marks_an_exercise FALSE)
  set(number 0)
  while(NOT rest STREQUAL "")
    string(FIND "${rest}" "\n" end)
    if(end EQUAL -1)
      set(line "${rest}")
      set(rest "")
    else()
      string(SUBSTRING "${rest}" 0 ${end} line)
      math(EXPR end "${end} + 1")
      string(SUBSTRING "${rest}" ${end} -1 rest)
    endif()
    math(EXPR number "${number} + 1")
    set(where "${solution}:${number}")

    if(state STREQUAL todo)
      if(line MATCHES "^ *//" AND NOT line MATCHES "^ *// (STUB:|BEGIN EXERCISE|END EXERCISE)")
        string(APPEND stub "${line}\n")
        continue()
      endif()
      set(state inside)
    endif()

    if(line MATCHES "^( *)// STUB: ?(.*)$")
      string(APPEND stub "${CMAKE_MATCH_1}${CMAKE_MATCH_2}\n")
    elseif(line MATCHES "^( *)// BEGIN EXERCISE: (.+)$")
      if(NOT state STREQUAL outside)
        message(FATAL_ERROR "${where}: BEGIN EXERCISE inside another exercise part (END EXERCISE missing?)")
      endif()
      string(APPEND stub "${CMAKE_MATCH_1}// TODO: ${CMAKE_MATCH_2}\n")
      set(state todo)
      set(marks_an_exercise TRUE)
    elseif(line MATCHES "^ *// (BEGIN|END) EXERCISE")
      if(line MATCHES "BEGIN")
        message(FATAL_ERROR "${where}: BEGIN EXERCISE needs what to write: \"// BEGIN EXERCISE: <the TODO>\"")
      elseif(NOT state STREQUAL inside)
        message(FATAL_ERROR "${where}: END EXERCISE without a BEGIN EXERCISE before it")
      endif()
      set(state outside)
    elseif(state STREQUAL outside)
      string(APPEND stub "${line}\n")
    endif()
  endwhile()
  if(NOT state STREQUAL outside)
    message(FATAL_ERROR "${solution}: an exercise part is never closed with // END EXERCISE")
  endif()
  if(NOT marks_an_exercise)
    set(stub "")
  endif()
  set(${out} "${stub}" PARENT_SCOPE)
endfunction()

# As a script: write exercises/LAYER/NAME.cpp for every solutions/LAYER/NAME.cpp
# that marks an exercise, and say which files changed.
if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  get_filename_component(root ${CMAKE_CURRENT_LIST_DIR} DIRECTORY)
  file(GLOB solutions RELATIVE ${root}/solutions ${root}/solutions/*/*.cpp)
  foreach(solution IN LISTS solutions)
    labkit_exercise_stub(${root}/solutions/${solution} stub)
    if(stub STREQUAL "")
      continue()
    endif()
    set(exercise ${root}/exercises/${solution})
    set(old "")
    if(EXISTS ${exercise})
      file(READ ${exercise} old)
    endif()
    if(NOT old STREQUAL stub)
      file(WRITE ${exercise} "${stub}")
      message(STATUS "wrote exercises/${solution}")
    endif()
  endforeach()
endif()

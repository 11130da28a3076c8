# A learner's version of an exercise, and the binaries that link it.
#
# labkit_exercise_object(TARGET EXERCISE SOURCE): an object library of SOURCE,
# a version of EXERCISE (the learner's exercises/LAYER/EXERCISE.cpp, its stub,
# a mistake of the grader's corpus), compiled as its solution is, against its
# layer's includes and libraries (solutions/CMakeLists.txt).
function(labkit_exercise_object target exercise source)
  get_property(layer GLOBAL PROPERTY LABKIT_LAYER_OF_${exercise})
  get_property(includes GLOBAL PROPERTY LABKIT_INCLUDES_OF_${layer})
  get_property(depends GLOBAL PROPERTY LABKIT_DEPENDS_OF_${layer})
  add_library(${target} OBJECT ${source})
  target_include_directories(${target} PRIVATE ${includes})
  target_link_libraries(${target} PRIVATE ${depends})
endfunction()

# labkit_learners_code(TARGET VARIANT EXERCISE...): TARGET links the object
# library labkit_VARIANT_EXERCISE of each EXERCISE (VARIANT exercise: the
# learner's file, where it exists). Before TARGET links, each must define every
# function of its reference solution (cmake/defines_its_functions.sh): the
# layers' libraries hold the references, and the linker would take one missing
# from there without a word.
function(labkit_learners_code target variant)
  set(checks "")
  foreach(exercise IN LISTS ARGN)
    set(library labkit_${variant}_${exercise})
    get_property(layer GLOBAL PROPERTY LABKIT_LAYER_OF_${exercise})
    set(file exercises/${layer}/${exercise}.cpp)  # the learner's, missing
    set(object missing)
    if(TARGET ${library})
      target_sources(${target} PRIVATE $<TARGET_OBJECTS:${library}>)
      get_target_property(source ${library} SOURCES)
      file(RELATIVE_PATH file ${PROJECT_SOURCE_DIR} ${source})
      set(object $<TARGET_OBJECTS:${library}>)
    endif()
    list(APPEND checks ${file} $<TARGET_OBJECTS:labkit_solution_${exercise}> ${object})
  endforeach()
  add_custom_command(TARGET ${target} PRE_LINK
                     COMMAND ${PROJECT_SOURCE_DIR}/cmake/defines_its_functions.sh ${CMAKE_NM} ${checks}
                     WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} VERBATIM)
endfunction()

# within(WHAT ESTIMATE REFERENCE PER_MILLE): says how far ESTIMATE is from
# REFERENCE (whole numbers, CMake's integer math), and appends WHAT to the
# caller's `failed` where it is more than PER_MILLE thousandths off.
function(within what estimate reference limit)
  math(EXPR per_mille "1000 * (${estimate} - ${reference}) / ${reference}")
  message(STATUS "${what}: ${estimate} against ${reference}, ${per_mille} per mille")
  if(per_mille GREATER ${limit} OR per_mille LESS -${limit})
    set(failed "${failed} ${what}" PARENT_SCOPE)
  endif()
endfunction()

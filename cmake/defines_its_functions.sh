#!/bin/sh
# Run before a binary that links a learner's code links (the grade binaries,
# labs/mine/; cmake/learners_code.cmake): each exercise's object must define
# every function its reference solution defines. One that it lacks (removed,
# renamed, its parameters changed) the linker would take from the reference in
# the layer's library, and the learner's grade or run would be the reference's.
#
#   defines_its_functions.sh NM [FILE SOLUTION_OBJECT OBJECT]...
#
# FILE: the learner's file, as the error names it; OBJECT: its object, or
# "missing" where there is no such file.
nm=$1
shift
status=0
functions() { "$nm" -C --defined-only --extern-only "$1" | sed -n 's/^[0-9a-f]* [TDBR] //p'; }
while [ $# -ge 3 ]; do
  file=$1 solution=$2 object=$3
  shift 3
  if [ "$object" = missing ]; then
    echo "$file: error: the file is missing (git checkout -- $file brings back its stub)"
    status=1
    continue
  fi
  defined=$(functions "$object") || exit 1
  lacking=$(functions "$solution" | while IFS= read -r f; do
    printf '%s\n' "$defined" | grep -Fxq -- "$f" || printf '%s\n' "$f"
  done)
  [ -z "$lacking" ] && continue
  status=1
  printf '%s\n' "$lacking" | while IFS= read -r f; do
    echo "$file: error: defines no $f, a function the exercise asks for (renamed, removed, or its parameters" \
         "changed?): without it the reference solution would run in its place"
  done
done
exit $status

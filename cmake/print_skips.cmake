# ctest runs this after the tests (CTEST_CUSTOM_POST_TEST, set in the build's CTestCustom.cmake):
# it prints, under ctest's own summary, why each test skipped what it skipped: the distinct
# "# SKIP reason" lines each test program wrote, read back from ctest's log of this run.
# ctest shows a skipped test (exit 77) only as "***Skipped"; this is where the reason shows.
#   cmake -DLOG=<build>/Testing/Temporary/LastTest.log -P print_skips.cmake
cmake_minimum_required(VERSION 3.20)
# While ctest runs (and its post-test commands with it) this run's log is LOG.tmp; LOG is still
# the previous run's until ctest renames the one over the other as it exits.
if(EXISTS "${LOG}.tmp")
  set(LOG "${LOG}.tmp")
elseif(NOT EXISTS "${LOG}")
  return()
endif()
# One list element a line: ";" and brackets, which a CMake list would split on or nest by, are
# held as control characters until printed.
file(READ "${LOG}" text)
string(ASCII 1 sc)
string(ASCII 2 lb)
string(ASCII 3 rb)
string(REPLACE ";" "${sc}" text "${text}")
string(REPLACE "[" "${lb}" text "${text}")
string(REPLACE "]" "${rb}" text "${text}")
string(REPLACE "\n" ";" lines "${text}")
set(test "")
set(seen "")
set(out "")
foreach(line IN LISTS lines)
  if(line MATCHES "^[0-9]+/[0-9]+ Test: (.+)$")
    set(test "${CMAKE_MATCH_1}")
    set(seen "")
  elseif(line MATCHES "^# SKIP (.*)$")
    set(reason "${CMAKE_MATCH_1}")
    # "(see above)" repeats a reason the same test already gave.
    if(NOT reason MATCHES "\\(see above\\)$")
      string(MD5 key "${reason}")
      if(NOT key IN_LIST seen)
        list(APPEND seen "${key}")
        string(APPEND out "  ${test}: ${reason}\n")
      endif()
    endif()
  endif()
endforeach()
if(out)
  string(REPLACE "${sc}" ";" out "${out}")
  string(REPLACE "${lb}" "[" out "${out}")
  string(REPLACE "${rb}" "]" out "${out}")
  message("\nWhy tests skipped (the \"# SKIP\" lines they printed):\n${out}")
endif()

# Writes CTEST_FILE: one ctest test per GoogleTest suite of TEST_EXECUTABLE (named after the
# suite, running `--gtest_filter=<suite>.*`), with TEST_ENV as its environment. Run after each
# build of the executable by ktape_test_by_suite (tests/CMakeLists.txt), as
# gtest_discover_tests does for one test per test.
execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
                WORKING_DIRECTORY "${TEST_WORKING_DIR}"
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${rc}):\n${listing}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(out "")
set(count 0)
foreach(line IN LISTS lines)
  # A suite's line starts in column 0 ("Family/Suite." or "Suite.  # TypeParam = ..."); its
  # tests' lines are indented.
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    if(suite MATCHES "^DISABLED_")
      continue()
    endif()
    if(NOT suite MATCHES "^[A-Za-z0-9_/]+$")
      message(FATAL_ERROR "${TEST_EXECUTABLE}: cannot name a ctest test after suite '${suite}'")
    endif()
    string(APPEND out
      "add_test([==[${suite}]==] [==[${TEST_EXECUTABLE}]==] [==[--gtest_filter=${suite}.*]==])\n"
      "set_tests_properties([==[${suite}]==] PROPERTIES WORKING_DIRECTORY "
      "[==[${TEST_WORKING_DIR}]==] ENVIRONMENT [==[${TEST_ENV}]==])\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} lists no test suite")
endif()
file(WRITE "${CTEST_FILE}" "${out}")

# Helper functions so every target gets the same warnings, sanitizers and
# include layout. Public headers are included as "choir/...", internal ones
# rooted at src/ ("transport/tcp/...").

# -Wno-restrict: GCC 12 false positive on std::string concatenation at -O3 (GCC bug 105329).
set(CHOIR_WARNINGS -Wall -Wextra -Wshadow=local -Wnon-virtual-dtor -Wno-missing-field-initializers -Wno-restrict)
if(CHOIR_WERROR)
  list(APPEND CHOIR_WARNINGS -Werror)
endif()

set(CHOIR_SAN_FLAGS "")
if(CHOIR_SANITIZE)
  set(CHOIR_SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
elseif(CHOIR_TSAN)
  # -Wno-tsan: TSan does not model standalone fences; the shared-memory
  # doorbells use one between "I sleep" and the re-check (their partners are
  # seq_cst atomics, which TSan does see).
  set(CHOIR_SAN_FLAGS -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan)
endif()
if(CHOIR_SAN_FLAGS)
  add_compile_options(${CHOIR_SAN_FLAGS})
  add_link_options(${CHOIR_SAN_FLAGS})
endif()

function(choir_apply_defaults target)
  target_compile_options(${target} PRIVATE ${CHOIR_WARNINGS})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src)
endfunction()

# choir_test(NAME SOURCES... [LIBS ...] [TIMEOUT s] [SHARDS n]): a GoogleTest
# binary registered with ctest; with SHARDS, as n entries NAME_shardI that each
# run every n-th test (GoogleTest's sharding), so that a long binary stays well
# inside TIMEOUT under the sanitizers and its parts run side by side.
function(choir_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;SHARDS" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  choir_apply_defaults(${name})
  target_link_libraries(${name} PRIVATE choir_internal GTest::gtest GTest::gtest_main GTest::gmock ${ARG_LIBS})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(NOT ARG_SHARDS OR ARG_SHARDS LESS 2)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "unit;${ARG_LABELS}")
    return()
  endif()
  math(EXPR last "${ARG_SHARDS} - 1")
  foreach(i RANGE ${last})
    add_test(NAME ${name}_shard${i} COMMAND ${name})
    set_tests_properties(${name}_shard${i} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "unit;${ARG_LABELS}"
                         ENVIRONMENT "GTEST_TOTAL_SHARDS=${ARG_SHARDS};GTEST_SHARD_INDEX=${i}")
  endforeach()
endfunction()

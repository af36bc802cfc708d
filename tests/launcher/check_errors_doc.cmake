# Fails when docs/errors.md differs from what `choir doctor explain --all
# --markdown` prints, i.e. when the error table in include/choir/error_codes.h
# changed and the doc was not regenerated.
#
# Usage: cmake -DCHOIR_CLI=<choir binary> -DERRORS_DOC=<docs/errors.md> -P check_errors_doc.cmake
execute_process(
  COMMAND "${CHOIR_CLI}" doctor explain --all --markdown
  OUTPUT_VARIABLE generated
  ERROR_VARIABLE errors
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "`choir doctor explain --all --markdown` failed (${rc}): ${errors}")
endif()
if(NOT EXISTS "${ERRORS_DOC}")
  message(FATAL_ERROR "${ERRORS_DOC} is missing; create it with:\n"
                      "  choir doctor explain --all --markdown > docs/errors.md")
endif()
file(READ "${ERRORS_DOC}" committed)
if(NOT generated STREQUAL committed)
  message(FATAL_ERROR "docs/errors.md is out of date with include/choir/error_codes.h; "
                      "regenerate it with:\n"
                      "  build/<preset>/bin/choir doctor explain --all --markdown > docs/errors.md")
endif()
message(STATUS "docs/errors.md matches the error table")

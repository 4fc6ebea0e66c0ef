# Writes OUTPUT, a header that defines STRIDE_GIT_COMMIT as the commit being built, for
# benchmark reports: $STRIDE_COMMIT when set (a copy of the tree without its .git, such as
# the GPU machine's), else `git rev-parse --short HEAD` in SOURCE_DIR; no definition when
# neither. Run at every build, so that a report names the commit the binary was built from
# (not the one the build directory was configured at); the file is rewritten only when it
# changes, so that what includes it recompiles only then.
# Run as: cmake -DSOURCE_DIR=... -DOUTPUT=... -P commit.cmake
set(commit "$ENV{STRIDE_COMMIT}")
if(NOT commit)
  execute_process(COMMAND git rev-parse --short HEAD WORKING_DIRECTORY "${SOURCE_DIR}"
                  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(commit)
  set(text "#define STRIDE_GIT_COMMIT \"${commit}\"\n")
else()
  set(text "/* no commit known: not a git checkout, and STRIDE_COMMIT unset */\n")
endif()
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()

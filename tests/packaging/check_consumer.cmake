# Installs the build into a scratch prefix, builds tests/packaging/consumer against it with
# find_package(lastmile), runs it; and compiles lastmile.hpp alone with only include/ on the path.
file(REMOVE_RECURSE ${WORK_DIR})
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
run_step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix --component Unspecified)
run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/consumer -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
         -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step(${WORK_DIR}/build/consumer)
# The public header needs nothing but the standard library: third-party types never leak.
file(WRITE ${WORK_DIR}/header_alone.cpp "#include <lastmile/lastmile.hpp>\nint main() { return 0; }\n")
run_step(${CXX} -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -I${INCLUDE_DIR}
         ${WORK_DIR}/header_alone.cpp)
file(GLOB headers ${INCLUDE_DIR}/lastmile/*.hpp)
foreach(header ${headers})
  file(STRINGS ${header} includes REGEX "^#include")
  foreach(line ${includes})
    if(NOT line MATCHES "^#include <[a-z_]+>$" AND NOT line MATCHES "^#include \"lastmile/[a-z_]+\\.hpp\"$")
      message(FATAL_ERROR "${header}: public headers include only the standard library and lastmile/: ${line}")
    endif()
  endforeach()
endforeach()
message(STATUS "consumer built and ran; public headers are self-contained")

# Test fixture: installs the pinned npm packages of a folder of tests/node into the build tree.
#   cmake -DSRC=<tests/node/NAME> -DDST=<build dir> -DNPM=<npm> [-DEXTRA=<files>] -P npm_ci.cmake
# Copies package.json, package-lock.json, the folder's *.mjs scripts and the EXTRA files (a
# ;-list) of SRC, and the shared modules of tests/node (*.mjs); runs `npm ci` only when the lock
# file changed since the last install.
file(GLOB scripts RELATIVE ${SRC} ${SRC}/*.mjs)
foreach(file package.json package-lock.json ${scripts} ${EXTRA})
  configure_file(${SRC}/${file} ${DST}/${file} COPYONLY)
endforeach()
# The modules every folder's tests may use (tests/node/*.mjs: node's own modules only).
file(GLOB shared RELATIVE ${SRC}/.. ${SRC}/../*.mjs)
foreach(file ${shared})
  configure_file(${SRC}/../${file} ${DST}/${file} COPYONLY)
endforeach()
set(stamp ${DST}/node_modules/.parley-lock-stamp)
if(EXISTS ${stamp})
  file(READ ${stamp} installed)
  file(READ ${DST}/package-lock.json wanted)
  if(installed STREQUAL wanted)
    return()
  endif()
endif()
if(NOT NPM)
  message(FATAL_ERROR "npm not found: install nodejs and npm (scripts/setup.sh does)")
endif()
# The npm cache stays in the build tree too.
execute_process(COMMAND ${NPM} ci --no-audit --no-fund --loglevel=error --cache ${DST}/../npm-cache
                WORKING_DIRECTORY ${DST} RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "npm ci failed in ${DST} (${result})")
endif()
configure_file(${DST}/package-lock.json ${stamp} COPYONLY)

# Test fixture: installs the pinned npm packages of a tests/node folder (and its scripts) into
# the build tree.
#   cmake -DSRC=<tests/node> -DDST=<build dir> -DNPM=<npm> -P npm_ci.cmake
# Runs `npm ci` only when the lock file changed since the last install.
file(GLOB scripts RELATIVE ${SRC} ${SRC}/*.mjs)
foreach(file package.json package-lock.json ${scripts})
  configure_file(${SRC}/${file} ${DST}/${file} COPYONLY)
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
execute_process(COMMAND ${NPM} ci --no-audit --no-fund --loglevel=error
                WORKING_DIRECTORY ${DST} RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "npm ci failed in ${DST} (${result})")
endif()
configure_file(${DST}/package-lock.json ${stamp} COPYONLY)

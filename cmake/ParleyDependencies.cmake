# Every dependency comes from Debian's packages; scripts/setup.sh installs them.
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CURL REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(PostgreSQL REQUIRED)  # the parley::postgres component only
find_package(simdjson REQUIRED)
find_package(tomlplusplus REQUIRED)  # profiles.cpp (the library links it privately)
# RE2 runs the schemas' "pattern"s in linear time (tools/tool_schema.cpp; linked privately).
find_package(PkgConfig REQUIRED)
pkg_check_modules(RE2 REQUIRED IMPORTED_TARGET GLOBAL re2)

# valijson is header-only; Debian's package drags in Qt and Poco, so setup.sh may unpack
# the headers alone into .deps/valijson.
find_path(PARLEY_VALIJSON_INCLUDE_DIR valijson/validator.hpp
          HINTS ${PROJECT_SOURCE_DIR}/.deps/valijson/usr/include)
if(NOT PARLEY_VALIJSON_INCLUDE_DIR)
  message(FATAL_ERROR "valijson headers not found: run scripts/setup.sh")
endif()

if(PARLEY_BUILD_APPS OR PARLEY_BUILD_TESTS)
  find_package(CLI11 REQUIRED)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(LIBEDIT REQUIRED IMPORTED_TARGET libedit)
  find_path(PARLEY_HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)
endif()

# cpp-httplib for the mock server (src/mock, target parley_mock), used by the CLI, the tests and
# the benchmarks. Debian ships it compiled: link libcpp-httplib with the defines its .pc gives.
if(PARLEY_BUILD_APPS OR PARLEY_BUILD_TESTS OR PARLEY_BUILD_BENCH)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
endif()

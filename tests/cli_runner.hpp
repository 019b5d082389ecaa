// Runs the real `parley` binary (PARLEY_CLI_PATH) in a shell with a clean OPENAI_* environment
// and collects its exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace parley::testing {

struct CliRun {
  int exitCode = -1;
  std::string out;
  std::string err;
};

inline std::string shellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

// `env <env> parley <args> <input`; stdin and stderr go through files in `scratch`.
inline CliRun runCli(const std::vector<std::string>& args, const std::filesystem::path& scratch,
                     const std::string& env = "", const std::string& input = "") {
  std::filesystem::create_directories(scratch);
  const auto errFile = scratch / "stderr";
  const auto inFile = scratch / "stdin";
  std::ofstream(inFile, std::ios::binary) << input;
  std::string command =
      "env -u OPENAI_BASE_URL -u OPENAI_API_KEY -u OPENAI_MODEL -u "
      "PARLEY_CONFIG -u XDG_CONFIG_HOME " +
      // Stored conversations go to the scratch folder unless the test says where.
      shellQuote("XDG_DATA_HOME=" + (scratch / "data").string()) + " " + env + " " +
      shellQuote(PARLEY_CLI_PATH);
  for (const auto& a : args)
    command += " " + shellQuote(a);
  command += " 2>" + shellQuote(errFile.string()) + " <" + shellQuote(inFile.string());
  CliRun run;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return run;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0)
    run.out.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(errFile);
  std::stringstream text;
  text << err.rdbuf();
  run.err = text.str();
  return run;
}

// In a forked child: becomes `parley <args>` with the same clean OPENAI_* environment as
// runCli(). Never returns (exit 127 if the binary cannot be run).
[[noreturn]] inline void execCli(std::vector<std::string> args) {
  for (const char* name :
       {"OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "PARLEY_CONFIG", "XDG_CONFIG_HOME"})
    ::unsetenv(name);
  args.insert(args.begin(), PARLEY_CLI_PATH);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

}  // namespace parley::testing

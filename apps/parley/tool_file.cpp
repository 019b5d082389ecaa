#include "tool_file.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <toml++/toml.h>

#include "model/toml_json.hpp"

#include "demo_tools.hpp"
#include "parley/errors.hpp"

extern char** environ;

namespace parley::cli {
namespace {

using detail::tomlToJson;

// Closes the descriptors it holds on every path out.
struct Fd {
  int fd = -1;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct ToolSpec {
  std::string name;
  std::string description;
  nlohmann::json schema;
  std::vector<std::string> argv;
  ToolOptions options;
};

ToolSpec readTool(const toml::table& table, const std::string& where) {
  ToolSpec spec;
  for (const auto& [key, value] : table) {
    const std::string k(key.str());
    if (k != "name" && k != "description" && k != "command" && k != "timeout_ms" &&
        k != "parameters") {
      throw ValidationError(where + "." + k,
                            "unknown key (name, description, command, "
                            "timeout_ms, parameters)");
    }
  }
  auto name = table["name"].value<std::string>();
  if (!name) throw ValidationError(where + ".name", "required, a string");
  spec.name = *name;
  spec.description = table["description"].value_or(std::string());
  const toml::array* command = table["command"].as_array();
  if (!command || command->empty()) {
    throw ValidationError(where + ".command", "required, a non-empty array of strings (argv)");
  }
  for (const auto& part : *command) {
    auto text = part.value<std::string>();
    if (!text) throw ValidationError(where + ".command", "every element must be a string");
    spec.argv.push_back(*text);
  }
  if (const toml::node* timeout = table.get("timeout_ms")) {
    auto ms = timeout->value<int64_t>();
    if (!ms || *ms <= 0) throw ValidationError(where + ".timeout_ms", "must be a positive integer");
    spec.options.timeout = std::chrono::milliseconds(*ms);
  }
  if (const toml::node* parameters = table.get("parameters")) {
    if (auto text = parameters->value<std::string>()) {
      try {
        spec.schema = nlohmann::json::parse(*text);
      } catch (const nlohmann::json::parse_error& e) {
        throw ValidationError(where + ".parameters", std::string("not valid JSON: ") + e.what());
      }
    } else if (parameters->is_table()) {
      spec.schema = tomlToJson(*parameters);
    } else {
      throw ValidationError(where + ".parameters", "a table or a string of JSON Schema");
    }
  }
  return spec;
}

}  // namespace

std::string runToolCommand(const std::vector<std::string>& argv, const std::string& input,
                           const ToolContext& context) {
  int inPipe[2], outPipe[2], errPipe[2];
  if (::pipe2(inPipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  Fd inRead{inPipe[0]}, inWrite{inPipe[1]};
  if (::pipe2(outPipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  Fd outRead{outPipe[0]}, outWrite{outPipe[1]};
  if (::pipe2(errPipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  Fd errRead{errPipe[0]}, errWrite{errPipe[1]};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, inRead.fd, 0);
  posix_spawn_file_actions_adddup2(&actions, outWrite.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, errWrite.fd, 2);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(spawned));
  }
  inRead.reset();
  outWrite.reset();
  errWrite.reset();
  ::fcntl(inWrite.fd, F_SETFL, O_NONBLOCK);

  // One poll loop feeds stdin and drains stdout/stderr, so a command that writes before reading
  // everything cannot deadlock us; it wakes every 20 ms to look at the stop token.
  std::string out, err;
  size_t written = 0;
  if (input.empty()) inWrite.reset();
  bool killed = false;
  while (outRead.fd >= 0 || errRead.fd >= 0) {
    if (context.stopRequested()) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd fds[3];
    int n = 0;
    if (inWrite.fd >= 0) fds[n++] = {inWrite.fd, POLLOUT, 0};
    if (outRead.fd >= 0) fds[n++] = {outRead.fd, POLLIN, 0};
    if (errRead.fd >= 0) fds[n++] = {errRead.fd, POLLIN, 0};
    if (::poll(fds, n, 20) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (!fds[i].revents) continue;
      if (fds[i].fd == inWrite.fd) {
        ssize_t w = ::write(inWrite.fd, input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN && errno != EINTR) written = input.size();  // EPIPE: done
        if (written == input.size()) inWrite.reset();
      } else {
        char buffer[4096];
        ssize_t r = ::read(fds[i].fd, buffer, sizeof buffer);
        if (r > 0) {
          (fds[i].fd == outRead.fd ? out : err).append(buffer, static_cast<size_t>(r));
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          (fds[i].fd == outRead.fd ? outRead : errRead).reset();
        }
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (killed) throw std::runtime_error(argv[0] + " was stopped (timeout or cancel)");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how = WIFEXITED(status)
                                ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                : "was killed by signal " + std::to_string(WTERMSIG(status));
    while (!err.empty() && (err.back() == '\n' || err.back() == '\r'))
      err.pop_back();
    throw std::runtime_error(argv[0] + " " + how + (err.empty() ? "" : ": " + err));
  }
  return out;
}

void loadToolFile(const std::string& path, ToolRegistry& registry) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ValidationError(path, "cannot open the tools file");
  std::ostringstream text;
  text << in.rdbuf();
  toml::table root;
  try {
    root = toml::parse(text.str(), std::string_view(path));
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw ValidationError(
        path + ":" + std::to_string(where.line) + ":" + std::to_string(where.column),
        std::string(e.description()));
  }
  for (const auto& [key, value] : root) {
    if (key.str() != "tool") {
      throw ValidationError(path + ": " + std::string(key.str()),
                            "unknown top-level key (tools go in [[tool]] tables)");
    }
  }
  const toml::array* tools = root["tool"].as_array();
  if (!tools || tools->empty()) throw ValidationError(path, "no [[tool]] tables");
  std::vector<ToolSpec> specs;
  for (size_t i = 0; i < tools->size(); ++i) {
    const toml::table* table = (*tools)[i].as_table();
    const std::string where = path + ": tool[" + std::to_string(i) + "]";
    if (!table) throw ValidationError(where, "must be a table");
    specs.push_back(readTool(*table, where));
  }
  // Check every tool on a scratch registry first, so a bad file registers nothing.
  ToolRegistry scratch;
  auto noop = [](const nlohmann::json&, ToolContext&) -> nlohmann::json { return nullptr; };
  for (const auto& spec : specs)
    scratch.add(spec.name, spec.description, spec.schema, noop, spec.options);
  for (const auto& spec : specs) {
    registry.add(
        spec.name, spec.description, spec.schema,
        [argv = spec.argv](const nlohmann::json& args, ToolContext& context) -> nlohmann::json {
          std::string out = runToolCommand(argv, args.dump() + "\n", context);
          while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
            out.pop_back();
          auto parsed = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
          return parsed.is_discarded() ? nlohmann::json(out) : parsed;
        },
        spec.options);
  }
}

std::shared_ptr<ToolRegistry> makeToolRegistry(const std::vector<std::string>& sets,
                                               const std::vector<std::string>& files) {
  auto tools = std::make_shared<ToolRegistry>();
  for (const std::string& set : sets) {
    if (set != "demo") throw ValidationError("--tools", "unknown tool set \"" + set + "\" (demo)");
    addDemoTools(*tools);
  }
  for (const std::string& file : files)
    loadToolFile(file, *tools);
  return tools;
}

}  // namespace parley::cli

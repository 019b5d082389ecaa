#include "parley/command_tools.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <toml++/toml.h>

#include "model/toml_json.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/toml.hpp"
#include "tools/tool_output.hpp"

extern char** environ;

namespace parley {
namespace {

using detail::tomlToJson;

// The end of a command's stderr kept for its error message.
constexpr std::size_t kMaxStderrBytes = 8 << 10;

// Closes the descriptor it holds on every path out.
struct Fd {
  int fd = -1;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// posix_spawn attributes and file actions, destroyed on every path out.
struct SpawnSetup {
  posix_spawnattr_t attributes;
  posix_spawn_file_actions_t actions;
  SpawnSetup() {
    posix_spawnattr_init(&attributes);
    posix_spawn_file_actions_init(&actions);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

// write() to a pipe whose reader may be gone: fails with EPIPE instead of raising SIGPIPE,
// whatever the process's SIGPIPE disposition. SIGPIPE is blocked in this thread for the call,
// and one the write raised (it is sent to this thread) is taken off the pending set before the
// mask is restored; one that was pending before is left alone. (libpq does the same.)
ssize_t writeWithoutSigpipe(int fd, const char* data, std::size_t size) {
  sigset_t pipeOnly, previous, pending;
  sigemptyset(&pipeOnly);
  sigaddset(&pipeOnly, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipeOnly, &previous);
  sigpending(&pending);
  const bool wasPending = sigismember(&pending, SIGPIPE) == 1;
  const ssize_t written = ::write(fd, data, size);
  const int error = errno;
  if (written < 0 && error == EPIPE && !wasPending) {
    const timespec now{0, 0};
    while (sigtimedwait(&pipeOnly, nullptr, &now) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  errno = error;
  return written;
}

std::string withoutTrailingNewlines(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
    text.pop_back();
  return text;
}

const char* const kToolKeys =
    "name, description, command, env, timeout_ms, max_result_bytes, idempotent, "
    "requires_approval, parameters";

// What a command sees of parley's environment, unless its tool names more (CommandTool::env):
// where things are and how to write, never a credential (API keys live in the environment).
bool passedByDefault(std::string_view name) {
  for (std::string_view allowed : {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE",
                                   "TZ", "TMPDIR", "TERM", "PWD"})
    if (name == allowed) return true;
  return name.rfind("LC_", 0) == 0;
}

// The command's environment: "NAME=value" entries of `environ` that pass.
std::vector<std::string> commandEnvironment(const std::vector<std::string>& extra) {
  std::vector<std::string> kept;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string_view line(*entry);
    const std::string_view name = line.substr(0, line.find('='));
    if (passedByDefault(name) || std::find(extra.begin(), extra.end(), name) != extra.end())
      kept.emplace_back(line);
  }
  return kept;
}

bool isEnvName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

CommandTool readTool(const toml::table& table, const std::string& where) {
  CommandTool tool;
  for (const auto& [key, value] : table) {
    const std::string k(key.str());
    if (k != "name" && k != "description" && k != "command" && k != "env" && k != "timeout_ms" &&
        k != "max_result_bytes" && k != "idempotent" && k != "requires_approval" &&
        k != "parameters") {
      throw ValidationError(where + "." + k, std::string("unknown key (") + kToolKeys + ")");
    }
  }
  auto name = table["name"].value<std::string>();
  if (!name) throw ValidationError(where + ".name", "required, a string");
  tool.name = *name;
  tool.description = table["description"].value_or(std::string());
  const toml::array* command = table["command"].as_array();
  if (!command || command->empty()) {
    throw ValidationError(where + ".command", "required, a non-empty array of strings (argv)");
  }
  for (const auto& part : *command) {
    auto text = part.value<std::string>();
    if (!text) throw ValidationError(where + ".command", "every element must be a string");
    tool.command.push_back(*text);
  }
  if (const toml::node* env = table.get("env")) {
    const toml::array* names = env->as_array();
    if (!names) throw ValidationError(where + ".env", "an array of variable names");
    for (const auto& part : *names) {
      auto name = part.value<std::string>();
      if (!name || !isEnvName(*name))
        throw ValidationError(where + ".env",
                              "every element must be a variable name (A-Z, 0-9, _)");
      tool.env.push_back(*name);
    }
  }
  if (const toml::node* timeout = table.get("timeout_ms")) {
    auto ms = timeout->value<int64_t>();
    if (!ms || *ms <= 0) throw ValidationError(where + ".timeout_ms", "must be a positive integer");
    tool.options.timeout = std::chrono::milliseconds(*ms);
  }
  if (const toml::node* cap = table.get("max_result_bytes")) {
    auto bytes = cap->value<int64_t>();
    if (!bytes || *bytes < 1024) {
      throw ValidationError(where + ".max_result_bytes", "must be an integer >= 1024");
    }
    tool.options.maxResultBytes = static_cast<std::size_t>(*bytes);
  }
  for (auto [key, flag] : {std::pair{"idempotent", &tool.options.idempotent},
                           std::pair{"requires_approval", &tool.options.requiresApproval}}) {
    if (const toml::node* node = table.get(key)) {
      auto value = node->value<bool>();
      if (!value) throw ValidationError(where + "." + key, "must be true or false");
      *flag = *value;
    }
  }
  if (const toml::node* parameters = table.get("parameters")) {
    if (auto text = parameters->value<std::string>()) {
      try {
        tool.parameters = parseJson(*text);
      } catch (const ProtocolError& e) {
        throw ValidationError(where + ".parameters", e.what());
      }
    } else if (parameters->is_table()) {
      tool.parameters = tomlToJson(*parameters, where + ".parameters");
    } else {
      throw ValidationError(where + ".parameters", "a table or a string of JSON Schema");
    }
  }
  return tool;
}

struct CommandRun {
  std::string output;  // at most the cap
  bool truncated = false;
};

// The command runs in a process group of its own, so that whatever it starts is killed with it
// (on a timeout or a cancel, and once it has exited: a tool call leaves nothing running).
CommandRun runCommand(const std::vector<std::string>& argv, std::string_view input,
                      const ToolContext& context, std::size_t maxOutputBytes,
                      const std::vector<std::string>& env) {
  if (argv.empty()) throw std::runtime_error("no command to run");
  int inPipe[2], outPipe[2], errPipe[2];
  if (::pipe2(inPipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  Fd inRead{inPipe[0]}, inWrite{inPipe[1]};
  if (::pipe2(outPipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  Fd outRead{outPipe[0]}, outWrite{outPipe[1]};
  if (::pipe2(errPipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  Fd errRead{errPipe[0]}, errWrite{errPipe[1]};

  pid_t pid = 0;
  {
    SpawnSetup setup;
    posix_spawn_file_actions_adddup2(&setup.actions, inRead.fd, 0);
    posix_spawn_file_actions_adddup2(&setup.actions, outWrite.fd, 1);
    posix_spawn_file_actions_adddup2(&setup.actions, errWrite.fd, 2);
    // The command starts as from a shell: nothing blocked, SIGPIPE at its default action even
    // when the application ignores it (an ignored signal stays ignored across exec).
    sigset_t none, pipeOnly;
    sigemptyset(&none);
    sigemptyset(&pipeOnly);
    sigaddset(&pipeOnly, SIGPIPE);
    posix_spawnattr_setsigmask(&setup.attributes, &none);
    posix_spawnattr_setsigdefault(&setup.attributes, &pipeOnly);
    // A process group of its own, led by the command: killed whole at a timeout or cancel, and
    // a terminal's Ctrl-C goes to the application, which stops the command through the stop
    // token, instead of killing it behind the application's back (its failure would reach the
    // model as a result before the cancel is seen).
    posix_spawnattr_setpgroup(&setup.attributes, 0);
    posix_spawnattr_setflags(
        &setup.attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    std::vector<std::string> environment = commandEnvironment(env);
    std::vector<char*> envp;
    envp.reserve(environment.size() + 1);
    for (std::string& entry : environment)
      envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int spawned =
        ::posix_spawnp(&pid, args[0], &setup.actions, &setup.attributes, args.data(), envp.data());
    if (spawned != 0) {
      throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(spawned));
    }
  }
  inRead.reset();
  outWrite.reset();
  errWrite.reset();
  ::fcntl(inWrite.fd, F_SETFL, O_NONBLOCK);

  // One poll loop feeds stdin and drains stdout/stderr, so a command that writes before reading
  // everything cannot deadlock us; it wakes every 20 ms to look at the stop token. Output is
  // kept in bounded memory, however much the command prints.
  detail::OutputCollector out(maxOutputBytes);
  detail::OutputCollector err(kMaxStderrBytes);
  std::size_t written = 0;
  if (input.empty()) inWrite.reset();
  bool killed = false;
  char buffer[32 << 10];
  while (outRead.fd >= 0 || errRead.fd >= 0) {
    if (context.stopRequested()) {
      ::kill(-pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd fds[3];
    int n = 0;
    if (inWrite.fd >= 0) fds[n++] = {inWrite.fd, POLLOUT, 0};
    if (outRead.fd >= 0) fds[n++] = {outRead.fd, POLLIN, 0};
    if (errRead.fd >= 0) fds[n++] = {errRead.fd, POLLIN, 0};
    if (::poll(fds, static_cast<nfds_t>(n), 20) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (!fds[i].revents) continue;
      if (fds[i].fd == inWrite.fd) {
        const ssize_t w =
            writeWithoutSigpipe(inWrite.fd, input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<std::size_t>(w);
        // EPIPE: the command stopped reading (it may not want its input at all); its exit
        // status decides whether the call failed.
        if (w < 0 && errno != EAGAIN && errno != EINTR) written = input.size();
        if (written == input.size()) inWrite.reset();
      } else {
        const ssize_t r = ::read(fds[i].fd, buffer, sizeof buffer);
        if (r > 0) {
          (fds[i].fd == outRead.fd ? out : err)
              .append(std::string_view(buffer, static_cast<std::size_t>(r)));
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          (fds[i].fd == outRead.fd ? outRead : errRead).reset();
        }
      }
    }
  }
  // The leader is waited for without being reaped: until it is, its pid (the group's id) cannot
  // be taken by another process, so killing the group kills only what the command started.
  siginfo_t exited{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &exited, WEXITED | WNOWAIT) < 0 &&
         errno == EINTR) {
  }
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (killed) throw std::runtime_error(argv[0] + " was stopped (timeout or cancel)");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how = WIFEXITED(status)
                                ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                : "was killed by signal " + std::to_string(WTERMSIG(status));
    const std::string message = withoutTrailingNewlines(err.text());
    throw std::runtime_error(argv[0] + " " + how + (message.empty() ? "" : ": " + message));
  }
  return {out.text(), out.truncated()};
}

}  // namespace

std::string runToolCommand(const std::vector<std::string>& argv, std::string_view input,
                           const ToolContext& context, std::size_t maxOutputBytes) {
  return runCommand(argv, input, context, maxOutputBytes, {}).output;
}

void addCommandTool(ToolRegistry& registry, const CommandTool& tool) {
  if (tool.command.empty()) {
    throw ValidationError("tool.command", "required, a non-empty array of strings (argv)");
  }
  const std::size_t cap = tool.options.maxResultBytes;
  registry.add(
      tool.name, tool.description, tool.parameters,
      [argv = tool.command, env = tool.env, cap](const nlohmann::json& args,
                                                 ToolContext& context) -> nlohmann::json {
        CommandRun run = runCommand(argv, args.dump() + "\n", context, cap, env);
        if (run.truncated) return std::move(run.output);  // cut: text, not JSON
        std::string out = withoutTrailingNewlines(std::move(run.output));
        nlohmann::json parsed = parseJson(out, {}, /*allowExceptions=*/false);
        return parsed.is_discarded() ? nlohmann::json(std::move(out)) : parsed;
      },
      tool.options);
}

std::vector<CommandTool> readToolsFile(const std::string& path) {
  const toml::table root = detail::readTomlTable(path, "the tools file", kMaxTomlFileBytes);
  for (const auto& [key, value] : root) {
    if (key.str() != "tool") {
      throw ValidationError(path + ": " + std::string(key.str()),
                            "unknown top-level key (tools go in [[tool]] tables)");
    }
  }
  const toml::array* tools = root["tool"].as_array();
  if (!tools || tools->empty()) throw ValidationError(path, "no [[tool]] tables");
  std::vector<CommandTool> result;
  for (std::size_t i = 0; i < tools->size(); ++i) {
    const toml::table* table = (*tools)[i].as_table();
    const std::string where = path + ": tool[" + std::to_string(i) + "]";
    if (!table) throw ValidationError(where, "must be a table");
    result.push_back(readTool(*table, where));
  }
  return result;
}

void loadToolsFile(const std::string& path, ToolRegistry& registry) {
  std::vector<CommandTool> tools = readToolsFile(path);
  // Check every tool on a scratch registry first, so a bad file registers nothing.
  ToolRegistry scratch;
  for (const CommandTool& tool : tools) {
    if (registry.has(tool.name)) {
      throw ValidationError(path + ": tool.name",
                            "a tool named \"" + tool.name + "\" is already registered");
    }
    addCommandTool(scratch, tool);
  }
  for (const CommandTool& tool : tools)
    addCommandTool(registry, tool);
}

}  // namespace parley

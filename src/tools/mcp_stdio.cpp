// The stdio transport: the server is a child process; messages are lines of JSON on its stdin
// and stdout; its stderr is kept (the tail) for error messages.
//
// The child runs in a process group of its own, so that closing it also ends what it started
// (`npx` starts node) and a Ctrl-C meant for parley does not reach it. Its stdin is a socket
// pair, not a pipe: writes use MSG_NOSIGNAL, so a child that died cannot kill parley with
// SIGPIPE. One reader thread polls stdout, stderr and a wake-up eventfd.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "parley/errors.hpp"
#include "tools/mcp_transport.hpp"

extern char** environ;

namespace parley::detail {
namespace {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  int get() const noexcept { return fd_; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A mutex whose lock can be waited for until a deadline (std::timed_mutex's requirements, so
// std::unique_lock's try_lock_until works on it). Not std::timed_mutex: its try_lock_until is
// pthread_mutex_clocklock, which GCC 12's ThreadSanitizer does not intercept, so every unlock
// after it was reported as the unlock of an unlocked mutex and hid real reports.
class TimedMutex {
 public:
  void lock() {
    std::unique_lock guard(mutex_);
    freed_.wait(guard, [&] { return !held_; });
    held_ = true;
  }
  bool try_lock() {
    std::lock_guard guard(mutex_);
    if (held_) return false;
    held_ = true;
    return true;
  }
  bool try_lock_until(Clock::time_point deadline) {
    std::unique_lock guard(mutex_);
    if (!freed_.wait_until(guard, deadline, [&] { return !held_; })) return false;
    held_ = true;
    return true;
  }
  void unlock() {
    {
      std::lock_guard guard(mutex_);
      held_ = false;
    }
    freed_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable freed_;
  bool held_ = false;
};

std::string errnoText(int error) {
  return std::strerror(error);
}

// Milliseconds until `deadline` for poll(), at least 0.
int pollTimeout(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
}

// True once the process behind `pidfd` has exited, waiting up to `wait`.
bool exitedWithin(int pidfd, std::chrono::milliseconds wait) {
  if (pidfd < 0) return false;
  Clock::time_point deadline = Clock::now() + wait;
  for (;;) {
    pollfd fd{pidfd, POLLIN, 0};
    int ready = ::poll(&fd, 1, pollTimeout(deadline));
    if (ready > 0) return true;
    if (ready < 0 && errno == EINTR) continue;
    if (Clock::now() >= deadline) return false;
  }
}

class StdioTransport final : public McpTransport {
 public:
  explicit StdioTransport(const McpServerOptions& options) : options_(options) {}
  ~StdioTransport() override { close(); }

  void start(McpTransportEvents events) override {
    events_ = std::move(events);
    spawn();
    reader_ = std::thread([this] { readLoop(); });
  }

  void sendAnswer(const std::string& text) override {
    // The reading thread must not block long on a server that sends requests and does not
    // read: TimeoutError after kAnswerWait ends the connection (mcp_client.cpp).
    send(text, std::nullopt, Clock::now() + kAnswerWait, {});
  }

  void send(const std::string& text, std::optional<int64_t>, Clock::time_point deadline,
            const McpRouting& /*headers are HTTP's*/) override {
    // Waiting for another writer counts against the deadline too.
    std::unique_lock lock(writeMutex_, std::defer_lock);
    if (!lock.try_lock_until(deadline))
      throw TimeoutError("MCP server \"" + options_.name + "\" did not read its stdin in time");
    if (stdin_.get() < 0 || closing_.load())
      throw ConnectionError("MCP server \"" + options_.name + "\" is not running");
    std::string line = text;
    line += '\n';
    std::size_t written = 0;
    while (written < line.size()) {
      ssize_t n = ::send(stdin_.get(), line.data() + written, line.size() - written,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        written += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
        // The server is gone: say how it ended (its exit status, the end of its stderr), as the
        // reader will once it has collected that, rather than just "broken pipe".
        const Clock::time_point until =
            std::min(deadline, Clock::now() + 2 * options_.shutdownGrace);
        std::unique_lock lock(stateMutex_);
        if (closedCv_.wait_until(lock, until, [&] { return closedText_.has_value(); })) {
          // The reader ended it for breaking the protocol (before this write, when the server
          // spoke first): that is the error, whichever call meets it.
          if (closedByProtocol_) throw ProtocolError(*closedText_);
          throw ConnectionError(*closedText_);
        }
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // The child is not reading: wait for room until the deadline.
        pollfd fd{stdin_.get(), POLLOUT, 0};
        int ready = ::poll(&fd, 1, pollTimeout(deadline));
        if (ready == 0 && Clock::now() >= deadline) {
          // Part of the line went out: what follows would not parse; end the connection.
          if (written > 0) ::shutdown(stdin_.get(), SHUT_WR);
          throw TimeoutError("MCP server \"" + options_.name + "\" did not read its stdin in time");
        }
        continue;
      }
      throw ConnectionError("MCP server \"" + options_.name +
                            "\": cannot write to its stdin: " + errnoText(errno));
    }
  }

  void close() override {
    std::unique_lock closeLock(closeMutex_);
    if (closed_) return;
    closed_ = true;
    closing_.store(true);
    if (reader_.joinable()) {
      // Closing stdin is the polite request to exit (the MCP specification's shutdown). A writer
      // waits at most until its deadline; shutdown() without the lock ends its wait sooner.
      if (stdin_.get() >= 0) ::shutdown(stdin_.get(), SHUT_WR);
      if (!exitedWithin(pidfd_.get(), options_.shutdownGrace)) {
        signalGroup(SIGTERM);
        if (!exitedWithin(pidfd_.get(), options_.shutdownGrace)) signalGroup(SIGKILL);
      }
      std::uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
      reader_.join();
    }
    std::lock_guard lock(writeMutex_);
    stdin_.reset();
  }

  long processId() const override {
    std::lock_guard lock(stateMutex_);
    return reaped_ ? -1 : static_cast<long>(pid_);
  }

  std::string stderrTail() const override {
    std::lock_guard lock(stateMutex_);
    return stderrTail_;
  }

  int nonJsonLines() const override { return nonJson_.load(); }

 private:
  std::string who() const { return "MCP server \"" + options_.name + "\""; }

  void spawn() {
    int inPair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, inPair) != 0)
      throw ConnectionError(who() + ": socketpair failed: " + errnoText(errno));
    Fd inChild(inPair[0]), inOurs(inPair[1]);
    int outPipe[2], errPipe[2];
    if (::pipe2(outPipe, O_CLOEXEC) != 0)
      throw ConnectionError(who() + ": pipe failed: " + errnoText(errno));
    Fd outOurs(outPipe[0]), outChild(outPipe[1]);
    if (::pipe2(errPipe, O_CLOEXEC) != 0)
      throw ConnectionError(who() + ": pipe failed: " + errnoText(errno));
    Fd errOurs(errPipe[0]), errChild(errPipe[1]);
    Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (wake.get() < 0) throw ConnectionError(who() + ": eventfd failed: " + errnoText(errno));
    // The child must not be able to shut down our read side: only the write half is its stdin.
    ::shutdown(inChild.get(), SHUT_WR);

    // The environment: the inherited names that are set, then the configured ones.
    std::vector<std::string> envStrings;
    for (const std::string& name : options_.inheritEnv) {
      if (options_.env.contains(name)) continue;
      if (const char* value = std::getenv(name.c_str())) envStrings.push_back(name + "=" + value);
    }
    for (const auto& [name, value] : options_.env)
      envStrings.push_back(name + "=" + value);
    std::vector<char*> envp;
    envp.reserve(envStrings.size() + 1);
    for (std::string& entry : envStrings)
      envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::vector<std::string> argvStrings = options_.command;
    std::vector<char*> argv;
    argv.reserve(argvStrings.size() + 1);
    for (std::string& arg : argvStrings)
      argv.push_back(arg.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, inChild.get(), 0);
    posix_spawn_file_actions_adddup2(&actions, outChild.get(), 1);
    posix_spawn_file_actions_adddup2(&actions, errChild.get(), 2);
    if (!options_.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options_.cwd.c_str());
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    // PATH lookup uses this process's PATH, as a shell would.
    int spawned = ::posix_spawnp(&pid_, argv[0], &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (spawned != 0) {
      std::string why = errnoText(spawned);
      if (spawned == ENOENT && !options_.cwd.empty())
        why += " (or the working directory " + options_.cwd + " does not exist)";
      throw ConnectionError(who() + ": cannot run " + options_.command[0] + ": " + why);
    }
    pidfd_ = Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)));
    stdin_ = std::move(inOurs);
    stdout_ = std::move(outOurs);
    stderr_ = std::move(errOurs);
    wake_ = std::move(wake);
    ::fcntl(stdout_.get(), F_SETFL, O_NONBLOCK);
    ::fcntl(stderr_.get(), F_SETFL, O_NONBLOCK);
  }

  void signalGroup(int sig) {
    std::lock_guard lock(stateMutex_);
    if (!reaped_) ::kill(-pid_, sig);
  }

  void keepStderr(const char* data, std::size_t size) {
    std::lock_guard lock(stateMutex_);
    stderrTail_.append(data, size);
    if (stderrTail_.size() > options_.maxStderrBytes)
      stderrTail_.erase(0, stderrTail_.size() - options_.maxStderrBytes);
  }

  // Handles one complete stdout line; returns an error to end the connection with, or null.
  std::exception_ptr handleLine(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) return nullptr;
    McpReceived received = events_.onMessage(line);
    if (received.fatal) return received.fatal;
    if (received.valid) return nullptr;
    int count = ++nonJson_;
    if (firstNonJson_.empty()) firstNonJson_ = mcpExcerpt(line) + " (" + received.problem + ")";
    if (count > options_.maxNonJsonLines) {
      return std::make_exception_ptr(ProtocolError(
          who() + " wrote more than " + std::to_string(options_.maxNonJsonLines) +
          " lines on stdout that are not JSON-RPC (maxNonJsonLines), the first: " + firstNonJson_));
    }
    return nullptr;
  }

  void readLoop() {
    std::string buffer;
    std::exception_ptr fatal;
    bool errOpen = true;
    char chunk[65536];
    while (!fatal) {  // until stdout ends (below) or a fatal error
      pollfd fds[3] = {{stdout_.get(), POLLIN, 0},
                       {errOpen ? stderr_.get() : -1, POLLIN, 0},
                       {wake_.get(), POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        fatal = std::make_exception_ptr(ConnectionError(who() + ": poll failed"));
        break;
      }
      if (fds[2].revents) break;  // close(): the child is gone or being killed
      if (fds[1].revents) {
        ssize_t n = ::read(stderr_.get(), chunk, sizeof chunk);
        if (n > 0)
          keepStderr(chunk, static_cast<std::size_t>(n));
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
          errOpen = false;
      }
      if (fds[0].revents) {
        ssize_t n = ::read(stdout_.get(), chunk, sizeof chunk);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;  // stdout ended
        if (n < 0) continue;
        // Split into lines; a line longer than the cap ends the connection.
        std::string_view data(chunk, static_cast<std::size_t>(n));
        while (!data.empty() && !fatal) {
          std::size_t newline = data.find('\n');
          std::size_t take = newline == std::string_view::npos ? data.size() : newline;
          if (buffer.size() + take > options_.maxMessageBytes) {
            fatal = std::make_exception_ptr(ProtocolError(who() + " sent a message larger than " +
                                                          std::to_string(options_.maxMessageBytes) +
                                                          " bytes (maxMessageBytes)"));
            break;
          }
          if (newline == std::string_view::npos) {
            buffer.append(data);
            break;
          }
          if (buffer.empty()) {
            fatal = handleLine(data.substr(0, newline));
          } else {
            buffer.append(data.substr(0, newline));
            fatal = handleLine(buffer);
            buffer.clear();
          }
          data.remove_prefix(newline + 1);
        }
      }
    }
    if (fatal) signalGroup(SIGKILL);
    // Collect the rest of stderr (the reason a server died is usually its last line), then reap.
    Clock::time_point deadline = Clock::now() + options_.shutdownGrace;
    while (errOpen && !closing_.load()) {
      pollfd fds[2] = {{stderr_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      int ready = ::poll(fds, 2, pollTimeout(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0 || fds[1].revents) break;
      ssize_t n = ::read(stderr_.get(), chunk, sizeof chunk);
      if (n > 0)
        keepStderr(chunk, static_cast<std::size_t>(n));
      else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        errOpen = false;
    }
    std::string status = reap();
    if (closing_.load()) return;  // close() asked for it: no event
    if (!fatal) {
      std::string tail = stderrTail();
      while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r'))
        tail.pop_back();
      if (tail.size() > 600) tail = "..." + tail.substr(tail.size() - 600);
      std::string text = who() + " " + status;
      if (nonJson_.load() > 0)
        text += "; it wrote " + std::to_string(nonJson_.load()) +
                " lines on stdout that are not JSON-RPC, the first: " + firstNonJson_;
      if (!tail.empty()) text += "; its stderr ends with: " + tail;
      fatal = std::make_exception_ptr(ConnectionError(text));
    }
    // The client learns of the death first, so a writer woken below finds the connection dead
    // and the next call starts the server again.
    events_.onClosed(fatal);
    try {
      std::rethrow_exception(fatal);
    } catch (const std::exception& e) {
      std::lock_guard lock(stateMutex_);
      closedText_ = e.what();
      closedByProtocol_ = dynamic_cast<const ProtocolError*>(&e) != nullptr;
    }
    closedCv_.notify_all();
  }

  // Waits for the child (killing it after the grace period) and describes how it ended.
  std::string reap() {
    if (!exitedWithin(pidfd_.get(), options_.shutdownGrace)) signalGroup(SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    {
      std::lock_guard lock(stateMutex_);
      reaped_ = true;
      // Whatever the child started and left behind goes with it; the group id stays reserved
      // while any member lives, so this cannot reach an unrelated process.
      ::kill(-pid_, SIGKILL);
    }
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
    return "ended";
  }

  const McpServerOptions options_;
  McpTransportEvents events_;
  pid_t pid_ = -1;
  Fd pidfd_, stdin_, stdout_, stderr_, wake_;
  std::thread reader_;
  TimedMutex writeMutex_;
  std::mutex closeMutex_;
  bool closed_ = false;
  std::atomic<bool> closing_{false};
  mutable std::mutex stateMutex_;  // reaped_, stderrTail_, closedText_, closedByProtocol_
  std::condition_variable closedCv_;
  std::optional<std::string> closedText_;  // how the server ended, once the reader knows
  bool closedByProtocol_ = false;          // ended for breaking the protocol (a ProtocolError)
  bool reaped_ = false;
  std::string stderrTail_;
  std::atomic<int> nonJson_{0};
  std::string firstNonJson_;  // the reader thread's
};

}  // namespace

std::unique_ptr<McpTransport> makeStdioTransport(const McpServerOptions& options) {
  return std::make_unique<StdioTransport>(options);
}

}  // namespace parley::detail

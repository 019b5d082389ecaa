// The MCP client against the reference servers from npm (tests/node/mcp, installed by the
// mcp_npm_install fixture): @modelcontextprotocol/server-everything over stdio and over
// Streamable HTTP, and @modelcontextprotocol/server-filesystem. No part of MCP is mocked; the
// failure cases run real programs that misbehave (a shell printing garbage, a server killed
// mid-call).
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/mcp.hpp"
#include "parley/openai_client.hpp"
#include "parley/tools.hpp"

extern char** environ;

namespace parley {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kModules =
    std::string(PARLEY_MCP_NODE_DIR) + "/node_modules/@modelcontextprotocol";
const std::string kEverything = kModules + "/server-everything/dist/index.js";
const std::string kFilesystem = kModules + "/server-filesystem/dist/index.js";

McpServerOptions everything(std::string name = "everything") {
  McpServerOptions options;
  options.name = std::move(name);
  options.command = {PARLEY_NODE, kEverything, "stdio"};
  // server-everything does not exit when its stdin closes: do not wait the default 2 s for it.
  options.shutdownGrace = 200ms;
  return options;
}

// What a handler saw on the client's threads, for the test's thread to read: the answer that
// follows the call reaches the test through the server's process, an order ThreadSanitizer
// cannot see, so the two meet at a mutex.
template <class T>
class Seen {
 public:
  void add(T value) {
    std::lock_guard lock(mutex_);
    values_.push_back(std::move(value));
  }
  std::vector<T> all() const {
    std::lock_guard lock(mutex_);
    return values_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<T> values_;
};

// Whatever a test expects to throw: the message, or "" when nothing was thrown.
template <typename Exception, typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.what();
  }
  return "";
}

bool processGone(long pid) {
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// ---------------------------------------------------------------------------------------------
// stdio

TEST(McpStdio, HandshakeListsAndCallsTools) {
  McpClient client(everything());
  McpServerInfo info = client.serverInfo();
  EXPECT_EQ(info.protocolVersion, "2025-11-25");
  EXPECT_EQ(info.name, "mcp-servers/everything");
  EXPECT_TRUE(info.capabilities.contains("tools"));

  std::vector<McpTool> tools = client.listTools();
  std::vector<std::string> names;
  for (const McpTool& tool : tools)
    names.push_back(tool.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "echo"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "get-sum"), names.end());

  McpToolResult echo = client.callTool("echo", {{"message", "hello"}});
  EXPECT_FALSE(echo.isError);
  EXPECT_EQ(echo.forModel(), "Echo: hello");
  McpToolResult sum = client.callTool("get-sum", {{"a", 2}, {"b", 40}});
  EXPECT_EQ(sum.forModel(), "The sum of 2 and 40 is 42.");
  client.ping();
  EXPECT_EQ(client.stats().starts, 1);
  EXPECT_EQ(client.stats().pendingRequests, 0u);
}

TEST(McpStdio, StructuredContentAndImagesAreMappedForTheModel) {
  McpClient client(everything());
  McpToolResult weather = client.callTool("get-structured-content", {{"location", "Chicago"}});
  ASSERT_TRUE(weather.structuredContent.is_object()) << weather.structuredContent;
  EXPECT_EQ(weather.structuredContent["temperature"], 36);
  // The model reads the text blocks unless structured content is preferred.
  ASSERT_TRUE(weather.forModel().is_string());
  EXPECT_EQ(json::parse(weather.forModel().get<std::string>()), weather.structuredContent);
  EXPECT_EQ(weather.forModel(/*preferStructured=*/true), weather.structuredContent);
  McpToolResult image = client.callTool("get-tiny-image", json::object());
  std::string text = image.forModel().get<std::string>();
  EXPECT_NE(text.find("[image: image/png, "), std::string::npos) << text;
  EXPECT_EQ(text.find("iVBOR"), std::string::npos) << "the base64 data must not reach the model";
}

TEST(McpStdio, ServerErrorsAreResultsWithIsError) {
  McpClient client(everything());
  McpToolResult wrong = client.callTool("echo", {{"message", 5}});
  EXPECT_TRUE(wrong.isError);
  EXPECT_NE(wrong.forModel().get<std::string>().find("message"), std::string::npos)
      << wrong.forModel();
}

TEST(McpStdio, ProgressNotificationsReachTheCallback) {
  std::mutex mutex;
  std::vector<McpProgress> seen;
  McpServerOptions options = everything();
  options.onProgress = [&](const McpProgress& progress) {
    std::lock_guard lock(mutex);
    seen.push_back(progress);
  };
  McpClient client(options);
  McpToolResult result =
      client.callTool("trigger-long-running-operation", {{"duration", 0.3}, {"steps", 3}});
  EXPECT_NE(result.forModel().get<std::string>().find("Steps: 3"), std::string::npos);
  std::lock_guard lock(mutex);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].progress, 3);
  EXPECT_EQ(seen[2].total, 3);
  EXPECT_EQ(seen[0].tool, "trigger-long-running-operation");
  EXPECT_EQ(seen[0].server, "everything");
  EXPECT_EQ(client.stats().progressReceived, 3);
}

TEST(McpStdio, ATimeoutCancelsTheCallOnTheServer) {
  McpClient client(everything());
  client.connect();
  McpCallOptions call;
  call.timeout = 200ms;
  std::string error = errorOf<TimeoutError>([&] {
    client.callTool("trigger-long-running-operation", {{"duration", 60}, {"steps", 60}}, call);
  });
  EXPECT_NE(error.find("no answer to tools/call in time"), std::string::npos) << error;
  EXPECT_EQ(client.stats().cancellationsSent, 1);
  EXPECT_EQ(client.stats().pendingRequests, 0u);
  // The connection goes on.
  EXPECT_EQ(client.callTool("echo", {{"message", "still here"}}).forModel(), "Echo: still here");
  EXPECT_EQ(client.stats().starts, 1);
}

TEST(McpStdio, EnvironmentIsChosenByTheUser) {
  ::setenv("PARLEY_MCP_TEST_SECRET", "do-not-leak", 1);
  McpServerOptions options = everything();
  options.env = {{"PARLEY_MCP_TEST_GIVEN", "given-value"}};
  McpClient client(options);
  std::string env = client.callTool("get-env", json::object()).forModel().get<std::string>();
  EXPECT_NE(env.find("given-value"), std::string::npos);
  EXPECT_EQ(env.find("do-not-leak"), std::string::npos);
  EXPECT_NE(env.find("\"PATH\""), std::string::npos);
  ::unsetenv("PARLEY_MCP_TEST_SECRET");
}

TEST(McpStdio, AServerKilledMidCallIsAnErrorAndIsRestartedOnTheNextCall) {
  std::promise<void> started;
  std::once_flag once;
  McpServerOptions options = everything();
  options.onProgress = [&](const McpProgress&) {
    std::call_once(once, [&] { started.set_value(); });
  };
  McpClient client(options);
  client.connect();
  long pid = client.stats().processId;
  ASSERT_GT(pid, 0);
  auto call = std::async(std::launch::async, [&] {
    return errorOf<ConnectionError>([&] {
      client.callTool("trigger-long-running-operation", {{"duration", 60}, {"steps", 60}});
    });
  });
  started.get_future().wait();  // the call is in flight on the server
  ::kill(static_cast<pid_t>(pid), SIGKILL);
  std::string error = call.get();
  EXPECT_NE(error.find("MCP server \"everything\" was killed by signal 9"), std::string::npos)
      << error;
  EXPECT_EQ(client.stats().pendingRequests, 0u);

  EXPECT_EQ(client.callTool("echo", {{"message", "again"}}).forModel(), "Echo: again");
  EXPECT_EQ(client.stats().starts, 2);
  EXPECT_NE(client.stats().processId, pid);
}

TEST(McpStdio, RestartsAreBounded) {
  McpServerOptions options;
  options.name = "dies";
  options.command = {"sh", "-c", "echo 'cannot start: no database' >&2; exit 3"};
  options.maxRestarts = 2;
  McpClient client(options);
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::string error = errorOf<ConnectionError>([&] { client.ping(); });
    EXPECT_NE(error.find("exited with status 3"), std::string::npos) << error;
    EXPECT_NE(error.find("cannot start: no database"), std::string::npos) << error;
  }
  std::string error = errorOf<ConnectionError>([&] { client.ping(); });
  EXPECT_NE(error.find("given up on after 2 restarts in a row (maxRestarts)"), std::string::npos)
      << error;
  EXPECT_EQ(client.stats().starts, 3);
}

TEST(McpStdio, GarbageOnStdoutIsSkippedAndCounted) {
  McpServerOptions options = everything("noisy");
  options.command = {
      "sh",        "-c",        "echo 'Server starting...'; echo '{not json'; exec \"$0\" \"$@\"",
      PARLEY_NODE, kEverything, "stdio"};
  McpClient client(options);
  EXPECT_EQ(client.callTool("echo", {{"message", "hi"}}).forModel(), "Echo: hi");
  EXPECT_EQ(client.stats().nonJsonLines, 2);
}

TEST(McpStdio, OnlyGarbageEndsTheConnectionAtTheCap) {
  McpServerOptions options;
  options.name = "garbage";
  options.command = {"yes", "this is not JSON-RPC"};
  options.maxNonJsonLines = 50;
  McpClient client(options);
  std::string error = errorOf<ProtocolError>([&] { client.connect(); });
  EXPECT_NE(error.find("more than 50 lines on stdout that are not JSON-RPC (maxNonJsonLines)"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("\"this is not JSON-RPC\""), std::string::npos) << error;
}

TEST(McpStdio, AMessageOverTheSizeCapEndsTheConnection) {
  McpServerOptions options;
  options.name = "huge";
  options.command = {"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a; echo"};
  options.maxMessageBytes = 1 << 20;
  McpClient client(options);
  std::string error = errorOf<ProtocolError>([&] { client.connect(); });
  EXPECT_NE(error.find("larger than 1048576 bytes (maxMessageBytes)"), std::string::npos) << error;
}

TEST(McpStdio, AMessageOverTheDepthCapIsRefused) {
  McpServerOptions options;
  options.name = "deep";
  std::string deep = std::string(100, '[') + std::string(100, ']');
  options.command = {"sh", "-c", "echo '" + deep + "'; sleep 30"};
  options.maxJsonDepth = 64;
  options.maxNonJsonLines = 0;
  McpClient client(options);
  std::string error = errorOf<ProtocolError>([&] { client.connect(); });
  EXPECT_NE(error.find("nested deeper than 64 levels"), std::string::npos) << error;
}

TEST(McpStdio, NoHandshakeNoTools) {
  McpServerOptions options;
  options.name = "silent";
  options.command = {"sleep", "30"};
  options.requestTimeout = 300ms;
  options.shutdownGrace = 100ms;
  ToolRegistry registry;
  std::string error = errorOf<TimeoutError>([&] { registry.addMcpServer("silent", options); });
  EXPECT_NE(error.find("did not answer initialize"), std::string::npos) << error;
  EXPECT_EQ(registry.size(), 0u);
}

TEST(McpStdio, AMissingProgramIsAConnectionError) {
  McpServerOptions options;
  options.name = "missing";
  options.command = {"parley-no-such-mcp-server"};
  McpClient client(options);
  std::string error = errorOf<ConnectionError>([&] { client.connect(); });
  EXPECT_NE(error.find("cannot run parley-no-such-mcp-server"), std::string::npos) << error;
}

TEST(McpStdio, ResourcesAndPrompts) {
  McpClient client(everything());
  McpListResult resources = client.listResources();
  ASSERT_FALSE(resources.items.empty());
  std::string uri = resources.items.front()["uri"].get<std::string>();
  json read = client.readResource(uri);
  ASSERT_TRUE(read["contents"].is_array());
  EXPECT_EQ(read["contents"][0]["uri"], uri);
  McpListResult prompts = client.listPrompts();
  ASSERT_FALSE(prompts.items.empty());
  json prompt = client.getPrompt(prompts.items.front()["name"].get<std::string>());
  EXPECT_TRUE(prompt["messages"].is_array()) << prompt;
}

TEST(McpOptions, BadOptionsNameTheField) {
  McpServerOptions both = everything("both");
  both.url = "http://127.0.0.1:1/mcp";
  try {
    McpClient client(both);
    FAIL() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "mcp.both");
  }
  McpServerOptions badUrl;
  badUrl.name = "web";
  badUrl.url = "ftp://example.com";
  EXPECT_EQ(errorOf<ValidationError>([&] { McpClient client(badUrl); }),
            "mcp.web.url: must start with http:// or https://");
  ToolRegistry registry;
  EXPECT_NE(errorOf<ValidationError>([&] {
              registry.addMcpServer("bad name", everything());
            }).find("mcp.name"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The registry and the tool loop

TEST(McpRegistry, ToolsArePrefixedFilteredAndValidated) {
  ToolRegistry registry;
  McpServerOptions options = everything();
  options.prefixToolNames = true;
  options.allow = {"echo", "get-sum", "trigger-long-running-operation"};
  options.deny = {"trigger-long-running-operation"};
  options.approval = McpApproval::Listed;
  options.approveTools = {"get-sum"};
  McpRegistration added = registry.addMcpServer("ev", options);
  EXPECT_EQ(added.tools, (std::vector<std::string>{"ev__echo", "ev__get-sum"}));
  EXPECT_TRUE(added.skipped.empty());
  EXPECT_EQ(registry.names(), added.tools);
  EXPECT_FALSE(registry.find("ev__echo")->options.requiresApproval);
  EXPECT_TRUE(registry.find("ev__get-sum")->options.requiresApproval);
  EXPECT_EQ(registry.find("ev__echo")->options.timeout, options.toolTimeout);

  auto shared = std::shared_ptr<ToolRegistry>(&registry, [](ToolRegistry*) {});
  ToolExecutor executor(shared);
  ToolResult ok = executor.execute({"c1", "ev__echo", R"({"message":"via the registry"})"});
  EXPECT_TRUE(ok.success) << ok.error;
  EXPECT_EQ(ok.content(), "Echo: via the registry");
  // The registry checks the schema before the server sees anything.
  ToolResult bad = executor.execute({"c2", "ev__get-sum", R"({"a":"two","b":1})"});
  EXPECT_EQ(bad.errorKind, ToolErrorKind::InvalidArguments);
  EXPECT_NE(bad.error.find("a: expected type number, got string"), std::string::npos) << bad.error;
}

TEST(McpRegistry, ToolsAreListedAgainWhenTheServerSaysTheyChanged) {
  // server-everything registers more tools once initialized and says so with
  // notifications/tools/list_changed.
  std::promise<std::vector<std::string>> refreshed;
  std::once_flag once;
  McpServerOptions options = everything();
  options.onToolsRefreshed = [&](const std::vector<std::string>& tools) {
    std::call_once(once, [&] { refreshed.set_value(tools); });
  };
  ToolRegistry registry;
  registry.addMcpServer("ev", options);
  std::vector<std::string> tools = refreshed.get_future().get();
  EXPECT_NE(std::find(tools.begin(), tools.end(), "simulate-research-query"), tools.end());
  EXPECT_NE(std::find(tools.begin(), tools.end(), "echo"), tools.end());
  for (const std::string& name : tools)
    EXPECT_TRUE(registry.has(name)) << name;
}

TEST(McpRegistry, TimeoutAndCancelReachTheServer) {
  ToolRegistry registry;
  McpServerOptions options = everything();
  options.toolTimeout = 300ms;
  std::promise<void> started;
  std::once_flag once;
  options.onProgress = [&](const McpProgress&) {
    std::call_once(once, [&] { started.set_value(); });
  };
  McpRegistration added = registry.addMcpServer("ev", options);
  auto shared = std::shared_ptr<ToolRegistry>(&registry, [](ToolRegistry*) {});
  ToolExecutor executor(shared);
  ToolResult timedOut =
      executor.execute({"c1", "trigger-long-running-operation", R"({"duration":60,"steps":60})"});
  EXPECT_EQ(timedOut.errorKind, ToolErrorKind::Timeout) << timedOut.error;

  std::stop_source stop;
  auto call = std::async(std::launch::async, [&] {
    return executor.execute(
        {"c2", "trigger-long-running-operation", R"({"duration":60,"steps":600})"},
        stop.get_token());
  });
  started.get_future().wait();
  stop.request_stop();
  EXPECT_EQ(call.get().errorKind, ToolErrorKind::Cancelled);
  // The connection outlives both (the notices themselves: McpStdio.ATimeoutCancelsTheCall...).
  McpCallOptions longer;
  longer.timeout = 30s;
  EXPECT_EQ(added.client->callTool("echo", {{"message", "x"}}, longer).forModel(), "Echo: x");
  EXPECT_EQ(added.client->stats().starts, 1);
}

TEST(McpRegistry, AServerThatDiesBecomesAnErrorResultAndComesBack) {
  ToolRegistry registry;
  McpRegistration added = registry.addMcpServer("ev", everything());
  auto shared = std::shared_ptr<ToolRegistry>(&registry, [](ToolRegistry*) {});
  ToolExecutor executor(shared);
  long pid = added.client->stats().processId;
  ::kill(static_cast<pid_t>(pid), SIGKILL);
  // The death is noticed when stdout closes; until then a call may still be sent into it.
  ToolResult result;
  for (int i = 0; i < 2; ++i) {
    result = executor.execute({"c1", "echo", R"({"message":"after death"})"});
    if (result.success) break;
    EXPECT_EQ(result.errorKind, ToolErrorKind::HandlerFailed);
    EXPECT_NE(result.content().find("MCP server \\\"ev\\\""), std::string::npos)
        << result.content();
  }
  EXPECT_TRUE(result.success) << result.error;
  EXPECT_EQ(added.client->stats().starts, 2);
}

TEST(McpRegistry, TheServerStopsWithTheRegistry) {
  long pid = -1;
  {
    ToolRegistry registry;
    McpRegistration added = registry.addMcpServer("ev", everything());
    pid = added.client->stats().processId;
    ASSERT_GT(pid, 0);
    EXPECT_FALSE(processGone(pid));
  }
  EXPECT_TRUE(processGone(pid));
}

TEST(McpRegistry, TheModelLoopCallsAnMcpTool) {
  mock::MockOptions mockOptions;
  mockOptions.script = mock::readScript(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "The server said: {{last_tool}}"}}
{"reply": {"content": "", "tool_calls": [{"name": "ev__echo", "arguments": {"message": "from the model"}}]}}
)");
  mock::MockServer server(mockOptions);
  server.start();
  auto registry = std::make_shared<ToolRegistry>();
  McpServerOptions options = everything();
  options.prefixToolNames = true;
  options.allow = {"echo"};
  registry->addMcpServer("ev", options);

  ClientOptions clientOptions;
  clientOptions.baseUrl = server.baseUrl();
  clientOptions.apiKey = "sk-test";
  clientOptions.model = "gpt-4o-mini";
  ConversationOptions conversation;
  conversation.llm = std::make_shared<OpenAiClient>(clientOptions);
  conversation.tools = registry;
  ConversationManager manager(conversation);
  RunResult result = manager.run("Say it through the server");
  EXPECT_EQ(result.content, "The server said: Echo: from the model");
  const json second = server.requests().at(1)["body"];
  EXPECT_EQ(second["tools"][0]["function"]["name"], "ev__echo");
  EXPECT_EQ(second["messages"].back()["role"], "tool");
  EXPECT_EQ(second["messages"].back()["content"], "Echo: from the model");
}

// ---------------------------------------------------------------------------------------------
// server-filesystem

class McpFilesystem : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("parley-mcp-fs-" + std::to_string(::getpid()));
    outside_ = fs::temp_directory_path() / ("parley-mcp-outside-" + std::to_string(::getpid()));
    fs::create_directories(root_);
    fs::create_directories(outside_);
    std::ofstream(root_ / "notes.txt") << "inside the root\n";
    std::ofstream(outside_ / "secret.txt") << "outside the root\n";
  }
  void TearDown() override {
    fs::remove_all(root_);
    fs::remove_all(outside_);
  }
  McpServerOptions options() const {
    McpServerOptions o;
    o.command = {PARLEY_NODE, kFilesystem, root_.string()};
    return o;
  }
  fs::path root_, outside_;
};

TEST_F(McpFilesystem, ReadsInsideTheRootAndIsRefusedOutside) {
  auto registry = std::make_shared<ToolRegistry>();
  McpServerOptions o = options();
  o.allow = {"read_text_file", "list_allowed_directories"};
  McpRegistration added = registry->addMcpServer("fs", o);
  ASSERT_EQ(added.tools.size(), 2u) << ::testing::PrintToString(added.skipped);
  ToolExecutor executor(registry);
  ToolResult inside = executor.execute(
      {"c1", "read_text_file", json{{"path", (root_ / "notes.txt").string()}}.dump()});
  ASSERT_TRUE(inside.success) << inside.error;
  // read_text_file declares an outputSchema: the model gets its checked structuredContent.
  EXPECT_EQ(json::parse(inside.content()), json({{"content", "inside the root\n"}}))
      << inside.content();
  ToolResult outside = executor.execute(
      {"c2", "read_text_file", json{{"path", (outside_ / "secret.txt").string()}}.dump()});
  EXPECT_FALSE(outside.success);
  EXPECT_EQ(outside.errorKind, ToolErrorKind::HandlerFailed);
  EXPECT_NE(outside.error.find("Access denied"), std::string::npos) << outside.error;
  EXPECT_EQ(outside.content().find("outside the root"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Streamable HTTP: server-everything's streamableHttp mode on a free loopback port

class EverythingHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int attempt = 0; attempt < 3 && port_ == 0; ++attempt)
      start();
    ASSERT_NE(port_, 0) << "server-everything (streamableHttp) did not start: " << log_;
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status;
      ::waitpid(pid_, &status, 0);
    }
    if (err_ >= 0) ::close(err_);
  }

  static int freePort() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    socklen_t size = sizeof address;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
    ::close(fd);
    return ntohs(address.sin_port);
  }

  // Starts the server and reads its stderr until it says it listens (or it exits).
  void start() {
    int port = freePort();
    int pipeFds[2];
    ASSERT_EQ(::pipe2(pipeFds, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipeFds[1], 2);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    std::string portVar = "PORT=" + std::to_string(port);
    std::vector<std::string> envStrings = {portVar, std::string("PATH=") + std::getenv("PATH")};
    std::vector<char*> envp;
    for (auto& e : envStrings)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argvStrings = {PARLEY_NODE, kEverything, "streamableHttp"};
    std::vector<char*> argv;
    for (auto& a : argvStrings)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    int spawned = ::posix_spawn(&pid, PARLEY_NODE, &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(pipeFds[1]);
    ASSERT_EQ(spawned, 0);
    std::string text;
    char buffer[4096];
    const std::string ready = "listening on port " + std::to_string(port);
    for (;;) {
      ssize_t n = ::read(pipeFds[0], buffer, sizeof buffer);
      if (n <= 0) break;  // it exited (the port was taken after all)
      text.append(buffer, static_cast<size_t>(n));
      if (text.find(ready) != std::string::npos) {
        pid_ = pid;
        err_ = pipeFds[0];
        port_ = port;
        return;
      }
    }
    log_ += text;
    ::close(pipeFds[0]);
    int status;
    ::waitpid(pid, &status, 0);
  }

  McpServerOptions options() const {
    McpServerOptions o;
    o.name = "web";
    o.url = "http://127.0.0.1:" + std::to_string(port_) + "/mcp";
    o.bearerToken = "token-for-the-test";
    return o;
  }

  pid_t pid_ = -1;
  int err_ = -1;
  int port_ = 0;
  std::string log_;
};

TEST_F(EverythingHttp, HandshakeListsAndCallsTools) {
  McpClient client(options());
  McpServerInfo info = client.serverInfo();
  EXPECT_EQ(info.protocolVersion, "2025-11-25");
  EXPECT_EQ(info.name, "mcp-servers/everything");
  bool hasEcho = false;
  for (const McpTool& tool : client.listTools())
    hasEcho = hasEcho || tool.name == "echo";
  EXPECT_TRUE(hasEcho);
  EXPECT_EQ(client.callTool("echo", {{"message", "over http"}}).forModel(), "Echo: over http");
  EXPECT_EQ(client.callTool("get-sum", {{"a", 1}, {"b", 2}}).forModel(),
            "The sum of 1 and 2 is 3.");
  client.ping();
  EXPECT_EQ(client.stats().starts, 1);
}

TEST_F(EverythingHttp, ProgressArrivesOnTheRequestStream) {
  std::atomic<int> progress{0};
  McpServerOptions o = options();
  o.onProgress = [&](const McpProgress&) { ++progress; };
  McpClient client(o);
  McpToolResult result =
      client.callTool("trigger-long-running-operation", {{"duration", 0.3}, {"steps", 3}});
  EXPECT_NE(result.forModel().get<std::string>().find("Steps: 3"), std::string::npos);
  EXPECT_EQ(progress.load(), 3);
}

TEST_F(EverythingHttp, ATimeoutCancelsAndTheSessionGoesOn) {
  McpClient client(options());
  client.connect();
  McpCallOptions call;
  call.timeout = 200ms;
  std::string error = errorOf<TimeoutError>([&] {
    client.callTool("trigger-long-running-operation", {{"duration", 60}, {"steps", 60}}, call);
  });
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(client.stats().cancellationsSent, 1);
  EXPECT_EQ(client.callTool("echo", {{"message", "after"}}).forModel(), "Echo: after");
  EXPECT_EQ(client.stats().starts, 1);
}

TEST_F(EverythingHttp, ConcurrentCallsShareTheSession) {
  McpClient client(options());
  std::vector<std::future<std::string>> calls;
  for (int i = 0; i < 8; ++i) {
    calls.push_back(std::async(std::launch::async, [&client, i] {
      return client.callTool("echo", {{"message", std::to_string(i)}})
          .forModel()
          .get<std::string>();
    }));
  }
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(calls[i].get(), "Echo: " + std::to_string(i));
  EXPECT_EQ(client.stats().starts, 1);
}

TEST_F(EverythingHttp, TheRegistryCallsToolsOverHttp) {
  auto registry = std::make_shared<ToolRegistry>();
  McpServerOptions o = options();
  o.allow = {"echo"};
  McpRegistration added = registry->addMcpServer("web", o);
  EXPECT_EQ(added.tools, std::vector<std::string>{"echo"});
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"c1", "echo", R"({"message":"http"})"});
  EXPECT_TRUE(result.success) << result.error;
  EXPECT_EQ(result.content(), "Echo: http");
}

TEST(McpHttp, NothingListeningIsAConnectionError) {
  McpServerOptions o;
  o.name = "nobody";
  o.url = "http://127.0.0.1:9/mcp";
  McpClient client(o);
  std::string error = errorOf<ConnectionError>([&] { client.connect(); });
  EXPECT_NE(error.find("MCP server \"nobody\" at http://127.0.0.1:9/mcp"), std::string::npos)
      << error;
}

// ---------------------------------------------------------------------------------------------
// The server's requests (elicitation, sampling, roots), structured output, hostile servers and
// OAuth sign-in, against tests/node/mcp/test_server.mjs (plain JSON-RPC, no SDK).

const std::string kTestServer = std::string(PARLEY_MCP_NODE_DIR) + "/test_server.mjs";

McpServerOptions testServer(const std::string& mode) {
  McpServerOptions options;
  options.name = mode;
  options.command = {PARLEY_NODE, kTestServer, mode};
  options.shutdownGrace = 200ms;
  return options;
}

// What the relay server got back from the client for one request: its result or {"error":...}.
json relay(McpClient& client, const std::string& method, const json& params) {
  McpToolResult result = client.callTool("relay", {{"method", method}, {"params", params}});
  return json::parse(result.forModel().get<std::string>());
}

const json kForm = {
    {"type", "object"},
    {"properties",
     {{"name", {{"type", "string"}, {"default", "John Doe"}}},
      {"age", {{"type", "integer"}, {"default", 30}}},
      {"status", {{"type", "string"}, {"enum", {"active", "inactive"}}, {"default", "active"}}},
      {"colors",
       {{"type", "array"},
        {"items", {{"anyOf", {{{"const", "red"}, {"title", "Red"}}, {{"const", "blue"}}}}}}}},
      {"verified", {{"type", "boolean"}, {"default", true}}}}},
    {"required", {"name"}}};

TEST(McpServerRequests, AnElicitedFormGetsTheSchemaDefaults) {
  McpServerOptions options = testServer("relay");
  Seen<McpElicitation> asked;
  options.onElicitation = [&](const McpElicitation& request, std::stop_token) {
    asked.add(request);
    McpElicitationAnswer answer;
    answer.action = McpElicitationAnswer::Action::Accept;
    answer.content = {{"age", 41}, {"colors", {"blue"}}};
    return answer;
  };
  McpClient client(options);
  json answer = relay(client, "elicitation/create",
                      {{"message", "Who are you?"}, {"requestedSchema", kForm}});
  EXPECT_EQ(answer, json({{"action", "accept"},
                          {"content",
                           {{"name", "John Doe"},
                            {"age", 41},
                            {"status", "active"},
                            {"colors", {"blue"}},
                            {"verified", true}}}}))
      << answer.dump();
  std::vector<McpElicitation> seen = asked.all();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].mode, "form");
  EXPECT_EQ(seen[0].message, "Who are you?");
  // URL mode: the handler sees the page; the server gets the action only.
  json url = relay(client, "elicitation/create",
                   {{"mode", "url"},
                    {"message", "Sign the form"},
                    {"url", "https://example.com/form"},
                    {"elicitationId", "e-1"}});
  EXPECT_EQ(url, json({{"action", "accept"}})) << url.dump();
  seen = asked.all();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].url, "https://example.com/form");
}

TEST(McpServerRequests, AnAnswerOutsideTheFormIsNotSent) {
  McpServerOptions options = testServer("relay");
  options.onElicitation = [](const McpElicitation&, std::stop_token) {
    McpElicitationAnswer answer;
    answer.action = McpElicitationAnswer::Action::Accept;
    answer.content = {{"status", "sleeping"}};
    return answer;
  };
  McpClient client(options);
  json answer = relay(client, "elicitation/create", {{"message", "?"}, {"requestedSchema", kForm}});
  ASSERT_TRUE(answer.contains("error")) << answer.dump();
  EXPECT_NE(
      answer["error"]["message"].get<std::string>().find("\"status\" is not one of its options"),
      std::string::npos)
      << answer.dump();
}

TEST(McpServerRequests, FormsPastTheCapsNeverReachTheHandler) {
  McpServerOptions options = testServer("relay");
  std::atomic<int> calls = 0;
  options.onElicitation = [&](const McpElicitation&, std::stop_token) {
    ++calls;
    return McpElicitationAnswer{};
  };
  McpClient client(options);
  json many = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 33; ++i)
    many["properties"]["field" + std::to_string(i)] = {{"type", "string"}};
  json answer = relay(client, "elicitation/create", {{"message", "?"}, {"requestedSchema", many}});
  EXPECT_EQ(answer["error"]["code"], -32602) << answer.dump();
  EXPECT_NE(answer.dump().find("(maxElicitationProperties)"), std::string::npos) << answer.dump();

  json large = {
      {"type", "object"},
      {"properties", {{"a", {{"type", "string"}, {"description", std::string(20000, 'x')}}}}}};
  answer = relay(client, "elicitation/create", {{"message", "?"}, {"requestedSchema", large}});
  EXPECT_NE(answer.dump().find("(maxElicitationSchemaBytes)"), std::string::npos) << answer.dump();

  json nested = {{"type", "object"},
                 {"properties", {{"a", {{"type", "object"}, {"properties", json::object()}}}}}};
  answer = relay(client, "elicitation/create", {{"message", "?"}, {"requestedSchema", nested}});
  EXPECT_NE(answer.dump().find("has type \\\"object\\\""), std::string::npos) << answer.dump();
  EXPECT_EQ(calls, 0);
}

TEST(McpServerRequests, WithoutAHandlerElicitationIsNotOffered) {
  McpClient client(testServer("relay"));
  json answer = relay(client, "elicitation/create", {{"message", "?"}, {"requestedSchema", kForm}});
  EXPECT_EQ(answer["error"]["code"], -32601) << answer.dump();
}

TEST(McpServerRequests, SamplingIsAnsweredByTheHandlerWithinTheCaps) {
  McpServerOptions options = testServer("relay");
  options.samplingMaxTokens = 100;
  Seen<json> seen;
  options.onSampling = [&](const McpSamplingRequest& request, std::stop_token) {
    seen.add(request.params);
    return json{{"role", "assistant"},
                {"content", {{"type", "text"}, {"text", "Paris"}}},
                {"model", "the-model"}};
  };
  McpClient client(options);
  json message = {{"role", "user"},
                  {"content", {{"type", "text"}, {"text", "Capital of France?"}}}};
  json answer =
      relay(client, "sampling/createMessage", {{"messages", {message}}, {"maxTokens", 5000}});
  EXPECT_EQ(answer["content"]["text"], "Paris") << answer.dump();
  ASSERT_EQ(seen.all().size(), 1u);
  EXPECT_EQ(seen.all()[0]["maxTokens"], 100);  // clipped to samplingMaxTokens

  json many = json::array();
  for (int i = 0; i < 65; ++i)
    many.push_back(message);
  answer = relay(client, "sampling/createMessage", {{"messages", many}, {"maxTokens", 10}});
  EXPECT_NE(answer.dump().find("(maxSamplingMessages)"), std::string::npos) << answer.dump();
  json huge = message;
  huge["content"]["text"] = std::string(options.maxSamplingBytes, 'x');
  answer = relay(client, "sampling/createMessage", {{"messages", {huge}}, {"maxTokens", 10}});
  EXPECT_NE(answer.dump().find("(maxSamplingBytes)"), std::string::npos) << answer.dump();
}

TEST(McpServerRequests, RootsAreListed) {
  McpServerOptions options = testServer("relay");
  options.roots = {{"file:///srv/docs", "docs"}};
  McpClient client(options);
  EXPECT_EQ(relay(client, "roots/list", json::object()),
            json({{"roots", {{{"uri", "file:///srv/docs"}, {"name", "docs"}}}}}));
}

TEST(McpStructured, StructuredContentIsCheckedAgainstTheOutputSchema) {
  McpClient client(testServer("structured"));
  std::vector<McpTool> tools = client.listTools();
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0].annotations["readOnlyHint"], true);
  McpToolResult good = client.callTool("weather", json::object());
  EXPECT_FALSE(good.isError);
  EXPECT_EQ(good.structuredContent, json({{"celsius", 21.5}}));
  McpToolResult bad = client.callTool("weather", {{"bad", true}});
  EXPECT_TRUE(bad.isError);
  EXPECT_NE(bad.forModel().get<std::string>().find("does not match its outputSchema"),
            std::string::npos)
      << bad.forModel();
}

TEST(McpStructured, TheModelSeesTheStructuredContentOfATool) {
  auto registry = std::make_shared<ToolRegistry>();
  registry->addMcpServer("structured", testServer("structured"));
  ToolExecutor executor(registry);
  ToolResult result = executor.execute({"c1", "weather", "{}"});
  EXPECT_TRUE(result.success) << result.error;
  EXPECT_EQ(json::parse(result.content()), json({{"celsius", 21.5}})) << result.content();
}

TEST(McpHostile, AServerThatFloodsRequestsAndStopsReadingCannotHoldACall) {
  McpClient client(testServer("flood"));
  client.connect();
  McpCallOptions call;
  call.timeout = 1000ms;
  // Before the fix the call took 33-63 s (answers and the cancellation waited for a server that
  // does not read, up to requestTimeout each); 15 s is far from both.
  auto started = std::chrono::steady_clock::now();
  std::string error;
  try {
    client.callTool("flood", json::object(), call);
  } catch (const Error& e) {
    error = e.what();
  }
  client.close();
  auto took = std::chrono::steady_clock::now() - started;
  EXPECT_LT(took, 15s);
  EXPECT_TRUE(error.find("does not read the answers") != std::string::npos ||
              error.find("no answer to tools/call in time") != std::string::npos)
      << error;
}

TEST(McpHostile, ToolDefinitionsAreCappedInBytes) {
  McpClient client(testServer("big-tools"));
  std::string error = errorOf<ProtocolError>([&] { client.listTools(); });
  EXPECT_NE(error.find("take more than 1048576 bytes (maxToolBytes)"), std::string::npos) << error;
  McpServerOptions roomy = testServer("big-tools");
  roomy.maxToolBytes = 2 << 20;
  McpClient enough(roomy);
  EXPECT_EQ(enough.listTools().size(), 12u);
}

// A test server over HTTP (test_server.mjs MODE ARG); it prints "port N" when it listens.
class HttpTestServer {
 public:
  HttpTestServer(const std::string& mode, const std::string& variant,
                 const std::string& settings = "") {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    std::vector<std::string> args = {PARLEY_NODE, kTestServer, mode, variant};
    if (!settings.empty()) args.push_back(settings);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::posix_spawn(&pid_, PARLEY_NODE, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    std::string text;
    char buffer[256];
    while (text.find('\n') == std::string::npos) {
      ssize_t n = ::read(out[0], buffer, sizeof buffer);
      if (n <= 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(out[0]);
    if (text.rfind("port ", 0) == 0) port_ = std::stoi(text.substr(5));
  }
  ~HttpTestServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status;
      ::waitpid(pid_, &status, 0);
    }
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/mcp"; }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

class OAuthServer : public HttpTestServer {
 public:
  explicit OAuthServer(const std::string& variant) : HttpTestServer("oauth", variant) {}
};

McpServerOptions signingIn(const OAuthServer& server, int* signIns) {
  McpServerOptions options;
  options.name = "secured";
  options.url = server.url();
  options.oauth.authorize = [signIns](const McpAuthorizationRequest& request, std::stop_token) {
    ++*signIns;
    return mcpFollowAuthorizationRedirect(request, 5s);
  };
  return options;
}

TEST(McpOAuth, SignsInRefreshesAndKeepsTheTokensInAPrivateFile) {
  OAuthServer server("ok");
  ASSERT_GT(server.port(), 0);
  fs::path dir = fs::temp_directory_path() / ("parley-oauth-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string tokenFile = (dir / "tokens.json").string();
  int signIns = 0;
  {
    McpServerOptions options = signingIn(server, &signIns);
    options.oauth.tokenFile = tokenFile;
    McpClient client(options);
    EXPECT_EQ(client.serverInfo().name, "parley-test-server");
    // The server refuses the first token once: the client refreshes it without a sign-in.
    ASSERT_EQ(client.listTools().size(), 1u);
  }
  EXPECT_EQ(signIns, 1);
  EXPECT_EQ(fs::status(tokenFile).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  std::ifstream in(tokenFile);
  std::string stored((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(stored.find("secret-refresh-token-2"), std::string::npos);
  {
    // The next run uses the stored token: no sign-in.
    McpServerOptions options = signingIn(server, &signIns);
    options.oauth.tokenFile = tokenFile;
    McpClient client(options);
    EXPECT_EQ(client.listTools().size(), 1u);
  }
  EXPECT_EQ(signIns, 1);
  fs::remove_all(dir);
}

TEST(McpOAuth, WithoutAWayToSignInA401IsAnError) {
  OAuthServer server("ok");
  McpServerOptions options;
  options.name = "secured";
  options.url = server.url();
  McpClient client(options);
  std::string error = errorOf<HttpError>([&] { client.connect(); });
  EXPECT_NE(error.find("401"), std::string::npos) << error;
}

TEST(McpOAuth, AMetadataDocumentPastTheCapIsRefused) {
  OAuthServer server("big-metadata");
  int signIns = 0;
  McpClient client(signingIn(server, &signIns));
  std::string error = errorOf<ProtocolError>([&] { client.connect(); });
  EXPECT_NE(error.find("larger than 65536 bytes (maxDocumentBytes)"), std::string::npos) << error;
  EXPECT_EQ(signIns, 0);
}

TEST(McpOAuth, AMetadataServerThatNeverAnswersIsGivenUpOn) {
  OAuthServer server("slow-metadata");
  int signIns = 0;
  McpServerOptions options = signingIn(server, &signIns);
  options.oauth.httpTimeout = 300ms;
  McpClient client(options);
  std::string error = errorOf<TimeoutError>([&] { client.connect(); });
  EXPECT_NE(error.find("(httpTimeout)"), std::string::npos) << error;
}

TEST(McpOAuth, ATokenAnswerPastTheCapIsRefused) {
  OAuthServer server("big-token");
  int signIns = 0;
  McpClient client(signingIn(server, &signIns));
  std::string error = errorOf<ProtocolError>([&] { client.connect(); });
  EXPECT_NE(error.find("(maxDocumentBytes)"), std::string::npos) << error;
  EXPECT_EQ(error.find("xxxxxxxx"), std::string::npos) << "the token leaked into: " << error;
}

TEST(McpOAuth, ASignInFromAnotherIssuerIsRefusedBeforeTheCodeIsRedeemed) {
  for (const char* variant : {"iss-wrong", "iss-missing"}) {
    OAuthServer server(variant);
    int signIns = 0;
    McpClient client(signingIn(server, &signIns));
    std::string error = errorOf<ProtocolError>([&] { client.connect(); });
    EXPECT_NE(error.find(std::string(variant) == "iss-wrong" ? "from issuer https://attacker"
                                                             : "without the iss"),
              std::string::npos)
        << variant << ": " << error;
    EXPECT_EQ(signIns, 1);
  }
}

// ---------------------------------------------------------------------------------------------
// The 2026-07-28 revision (stateless) and the negotiation between the eras

McpServerOptions modern(const std::string& versions = "2026-07-28") {
  McpServerOptions options = testServer("modern");
  options.command.push_back(versions);
  return options;
}

McpElicitationHandler answerName(const std::string& name, std::vector<McpElicitation>* asked) {
  return [name, asked](const McpElicitation& request, std::stop_token) {
    if (asked) asked->push_back(request);
    McpElicitationAnswer answer;
    answer.action = McpElicitationAnswer::Action::Accept;
    answer.content = {{"name", name}};
    return answer;
  };
}

TEST(McpModern, AutoSpeaksTheStatelessRevisionWithMetaOnEveryRequest) {
  McpServerOptions options = modern("2026-07-28,2025-11-25");
  options.roots = {{"file:///srv", "srv"}};
  McpClient client(options);
  McpServerInfo info = client.serverInfo();
  EXPECT_EQ(info.protocolVersion, "2026-07-28");
  EXPECT_TRUE(info.stateless);
  EXPECT_EQ(info.name, "parley-modern");
  EXPECT_EQ(info.instructions, "A stateless test server.");
  EXPECT_EQ(info.supportedVersions, (std::vector<std::string>{"2026-07-28", "2025-11-25"}));
  ASSERT_EQ(client.listTools().size(), 11u);  // the server refuses a request without _meta
  json seen = json::parse(client.callTool("meta", json::object()).forModel().get<std::string>());
  EXPECT_EQ(seen["meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28") << seen.dump();
  EXPECT_EQ(seen["meta"]["io.modelcontextprotocol/clientCapabilities"],
            json({{"roots", {{"listChanged", false}}},
                  {"extensions", {{"io.modelcontextprotocol/tasks", json::object()}}}}))
      << seen.dump();
  EXPECT_EQ(seen["meta"]["io.modelcontextprotocol/clientInfo"]["name"], "parley");
  client.ping();  // no ping in 2026-07-28: server/discover answers instead
}

TEST(McpModern, AnInputRequiredResultIsAnsweredAndTheCallSentAgainWithItsState) {
  McpServerOptions options = modern();
  std::vector<McpElicitation> asked;
  options.onElicitation = answerName("Ada", &asked);
  options.roots = {{"file:///srv/docs", "docs"}};
  McpClient client(options);
  EXPECT_EQ(client.callTool("ask", json::object()).forModel(), "Hello, Ada");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].message, "Your name?");
  EXPECT_EQ(client.callTool("roots", json::object()).forModel(),
            R"({"roots":[{"name":"docs","uri":"file:///srv/docs"}]})");
  // A call's own handler answers instead of the server's.
  McpCallOptions call;
  call.onElicitation = answerName("Grace", nullptr);
  EXPECT_EQ(client.callTool("ask", json::object(), call).forModel(), "Hello, Grace");
  EXPECT_EQ(asked.size(), 1u);
}

TEST(McpModern, InputRoundsAndRequestsAreCapped) {
  McpServerOptions options = modern();
  options.maxInputRounds = 3;
  McpClient client(options);
  std::string error = errorOf<ProtocolError>([&] { client.callTool("forever", json::object()); });
  EXPECT_NE(error.find("after 3 rounds of tools/call (maxInputRounds)"), std::string::npos)
      << error;
  // Asked for elicitation without offering it: an error naming the request, nothing sent.
  error = errorOf<ProtocolError>([&] { client.callTool("ask", json::object()); });
  EXPECT_NE(error.find("input request \"who\" (elicitation/create): this client did not offer "
                       "elicitation"),
            std::string::npos)
      << error;
}

TEST(McpModern, AutoFallsBackToInitializeForA2025Server) {
  McpClient client(testServer("relay"));  // answers server/discover with -32601
  McpServerInfo info = client.serverInfo();
  EXPECT_EQ(info.protocolVersion, "2025-11-25");
  EXPECT_FALSE(info.stateless);
  EXPECT_TRUE(info.supportedVersions.empty());

  McpServerOptions quiet = testServer("quiet");  // never answers server/discover
  quiet.discoverTimeout = 300ms;
  McpClient silent(quiet);
  EXPECT_EQ(silent.serverInfo().protocolVersion, "2025-11-25");
  EXPECT_EQ(silent.callTool("hello", json::object()).forModel(), "hello");
  EXPECT_EQ(silent.stats().cancellationsSent, 0);  // server/discover is not cancelled
}

TEST(McpModern, APinnedRevisionIsTheOnlyOneTried) {
  McpServerOptions legacy = modern();
  legacy.protocol = "2025-11-25";  // initialize, which this server refuses
  std::string error = errorOf<McpError>([&] { McpClient(legacy).connect(); });
  EXPECT_NE(error.find("initialize is gone"), std::string::npos) << error;

  McpServerOptions pinned = testServer("relay");
  pinned.protocol = "2026-07-28";
  error = errorOf<ProtocolError>([&] { McpClient(pinned).connect(); });
  EXPECT_NE(error.find("does not speak protocol version 2026-07-28"), std::string::npos) << error;

  McpServerOptions unknown = modern("2027-01-01");
  error = errorOf<ProtocolError>([&] { McpClient(unknown).connect(); });
  EXPECT_NE(error.find("speaks none of parley's protocol versions"), std::string::npos) << error;

  McpServerOptions bad = modern();
  bad.protocol = "2026-01-01";
  error = errorOf<ValidationError>([&] { McpClient client(bad); });
  EXPECT_NE(error.find("protocol"), std::string::npos) << error;
}

TEST(McpModern, OverHttpRequestsCarryTheStandardHeadersAndNoSession) {
  HttpTestServer server("modern-http", "2026-07-28");
  ASSERT_GT(server.port(), 0);
  McpServerOptions options;
  options.name = "modern-http";
  options.url = server.url();
  McpClient client(options);
  EXPECT_TRUE(client.serverInfo().stateless);
  json seen = json::parse(client.callTool("meta", json::object()).forModel().get<std::string>());
  EXPECT_EQ(seen["headers"], json({{"mcp-method", "tools/call"},
                                   {"mcp-name", "meta"},
                                   {"mcp-protocol-version", "2026-07-28"}}))
      << seen.dump();  // the session id the server sent is not sent back
  options.onElicitation = answerName("Ada", nullptr);
  McpClient asking(options);
  EXPECT_EQ(asking.callTool("ask", json::object()).forModel(), "Hello, Ada");
}

// x-mcp-header: a marked argument travels as an Mcp-Param header too (a string that is not plain
// ASCII in Base64, an integer in decimal, a null one not at all); a tool past the cap of 32
// marked properties is listed as unusable, refused, and not offered, and the others are.
TEST(McpModern, MarkedArgumentsAreMirroredIntoHeadersUpToTheCap) {
  HttpTestServer server("modern-http", "2026-07-28");
  ASSERT_GT(server.port(), 0);
  McpServerOptions options;
  options.name = "modern-http";
  options.url = server.url();
  McpClient client(options);
  std::string unusable;
  for (const McpTool& tool : client.listTools())
    if (tool.name == "crowded") unusable = tool.unusable;
  EXPECT_NE(unusable.find("more than 32 x-mcp-header annotations"), std::string::npos) << unusable;
  std::string error = errorOf<ValidationError>([&] { client.callTool("crowded", json::object()); });
  EXPECT_NE(error.find("cannot be called"), std::string::npos) << error;

  json seen = json::parse(
      client.callTool("meta", {{"region", "Zürich"}, {"count", 7}}).forModel().get<std::string>());
  EXPECT_EQ(seen["headers"]["mcp-param-region"], "=?base64?WsO8cmljaA==?=") << seen.dump();
  EXPECT_EQ(seen["headers"]["mcp-param-count"], "7") << seen.dump();
  seen = json::parse(client.callTool("meta", {{"region", "eu west"}, {"count", nullptr}})
                         .forModel()
                         .get<std::string>());
  EXPECT_EQ(seen["headers"]["mcp-param-region"], "eu west") << seen.dump();
  EXPECT_FALSE(seen["headers"].contains("mcp-param-count")) << seen.dump();

  ToolRegistry registry;
  McpRegistration added = registry.addMcpServer("modern-http", options);
  EXPECT_TRUE(registry.find("meta"));
  EXPECT_FALSE(registry.find("crowded"));
  ASSERT_EQ(added.skipped.size(), 1u);
  EXPECT_EQ(added.skipped[0].rfind("crowded: ", 0), 0u) << added.skipped[0];
}

// ---------------------------------------------------------------------------------------------
// 2026-07-28 caching hints on lists (ttlMs, cacheScope)

McpServerOptions cachingServer(const std::string& settings) {
  McpServerOptions options = modern();
  options.command.push_back(settings);
  return options;
}

// How many requests of `method` the test server saw (its "stats" tool, which counts itself
// after answering).
int served(McpClient& client, const std::string& method) {
  json counts = json::parse(client.callTool("stats", json::object()).forModel().get<std::string>());
  return counts.value(method, 0);
}

// Waits (bounded) until `ms` milliseconds have passed since `from`: the time a ttl lasts.
void letPass(std::chrono::steady_clock::time_point from, std::chrono::milliseconds ms) {
  while (std::chrono::steady_clock::now() < from + ms)
    std::this_thread::sleep_for(1ms);
}

TEST(McpCache, AListIsReusedWhileItsTtlLastsAndReadAgainAfter) {
  McpClient fresh(cachingServer("ttl=60000"));
  EXPECT_EQ(fresh.listTools().size(), 11u);
  EXPECT_EQ(fresh.listTools().size(), 11u);
  EXPECT_FALSE(fresh.toolListStale());
  EXPECT_EQ(served(fresh, "tools/list"), 1);
  EXPECT_EQ(fresh.stats().cachedListPages, 1);

  // No ttlMs: no caching hint, so every listing asks (and the list is never stale by time).
  McpClient untimed(cachingServer("ttl=none"));
  untimed.listTools();
  untimed.listTools();
  EXPECT_FALSE(untimed.toolListStale());
  EXPECT_EQ(served(untimed, "tools/list"), 2);

  McpClient brief(cachingServer("ttl=20"));
  brief.listTools();
  letPass(std::chrono::steady_clock::now(), 30ms);  // its freshness began before that
  EXPECT_TRUE(brief.toolListStale());
  brief.listTools();
  EXPECT_EQ(served(brief, "tools/list"), 2);
  EXPECT_EQ(brief.stats().cachedListPages, 0);
}

// "public": any client of the server may reuse the list, whatever its credentials; "private":
// only a client that sends the same credentials (caching.mdx, "Cache Scope Field").
TEST(McpCache, PublicListsAreSharedAcrossCredentialsPrivateOnesAreNot) {
  for (const std::string scope : {"public", "private"}) {
    HttpTestServer server("modern-http", "2026-07-28", "ttl=60000,scope=" + scope);
    ASSERT_GT(server.port(), 0);
    auto as = [&](const std::string& token) {
      McpServerOptions options;
      options.name = "cached";
      options.url = server.url();
      options.bearerToken = token;
      return options;
    };
    McpClient alice(as("alice-token"));
    McpClient bob(as("bob-token"));
    McpClient aliceAgain(as("alice-token"));
    alice.listTools();
    bob.listTools();
    aliceAgain.listTools();
    EXPECT_EQ(served(alice, "tools/list"), scope == "public" ? 1 : 2) << scope;
    EXPECT_EQ(aliceAgain.stats().cachedListPages, 1) << scope;
  }
}

// A registry reads a list whose ttl passed again when it builds a request's tools: the same
// tools change nothing (the prompt cache keeps its prefix); new ones take the server's place in
// the order and show in the cache diagnostic as "tools".
TEST(McpCache, TheRegistryReadsAStaleListAgainAndAChangeShowsInTheCacheDiagnostic) {
  mock::MockOptions mockOptions;
  mockOptions.script = mock::readScript(R"({"reply": {"content": "ok"}})");
  mock::MockServer model(mockOptions);
  model.start();
  auto registry = std::make_shared<ToolRegistry>();
  Seen<std::vector<std::string>> refreshed;
  McpServerOptions options = cachingServer("ttl=20");
  options.allow = {"meta", "stats", "grow", "extra"};
  options.onToolsRefreshed = [&](const std::vector<std::string>& tools) { refreshed.add(tools); };
  McpRegistration added = registry->addMcpServer("m", options);
  registry->add("local", "a tool of this process", json::object(),
                [](const json&, ToolContext&) { return json("local"); });
  McpClient& client = *added.client;

  ClientOptions clientOptions;
  clientOptions.baseUrl = model.baseUrl();
  clientOptions.apiKey = "sk-test";
  clientOptions.model = "gpt-4o-mini";
  ConversationOptions conversation;
  conversation.llm = std::make_shared<OpenAiClient>(clientOptions);
  conversation.tools = registry;
  ConversationManager manager(conversation);
  manager.run("first");

  // The ttl passed, the server's tools are the same: read again, nothing changes.
  int listings = served(client, "tools/list");
  auto before = std::chrono::steady_clock::now();
  letPass(before, 30ms);
  const std::uint64_t revision = registry->revision();
  std::optional<CacheDiagnostic> same = manager.diagnoseCache();
  ASSERT_TRUE(same);
  EXPECT_FALSE(same->firstDifference) << same->firstDifference->field;
  EXPECT_EQ(registry->revision(), revision);
  EXPECT_EQ(served(client, "tools/list"), listings + 1);  // it was read again
  EXPECT_TRUE(refreshed.all().empty());

  listings = served(client, "tools/list");
  before = std::chrono::steady_clock::now();
  client.callTool("grow", json::object());
  letPass(before, 30ms);
  std::optional<CacheDiagnostic> changed = manager.diagnoseCache();
  ASSERT_TRUE(changed && changed->firstDifference);
  EXPECT_EQ(changed->firstDifference->field, "tools");
  EXPECT_FALSE(changed->firstDifference->message);
  EXPECT_EQ(served(client, "tools/list"), listings + 1);
  EXPECT_EQ(registry->names(),
            (std::vector<std::string>{"meta", "stats", "grow", "extra", "local"}));
  ASSERT_EQ(refreshed.all().size(), 1u);
  EXPECT_EQ(refreshed.all()[0], (std::vector<std::string>{"meta", "stats", "grow", "extra"}));
}

// ---------------------------------------------------------------------------------------------
// The tasks extension (io.modelcontextprotocol/tasks): long calls answered with a task

std::string textOf(const McpToolResult& result) {
  json text = result.forModel();
  return text.is_string() ? text.get<std::string>() : text.dump();
}

TEST(McpTasks, ACallAnsweredWithATaskIsPolledToItsResult) {
  McpClient client(cachingServer("polls=3"));
  std::vector<std::string> noted;
  McpCallOptions call;
  call.onTask = [&](const std::string& id) { noted.push_back(id); };
  EXPECT_EQ(textOf(client.callTool("slow", json::object(), call)), "task-1 done after 3 polls");
  EXPECT_EQ(noted, std::vector<std::string>{"task-1"});
  EXPECT_EQ(client.stats().taskPolls, 3);
  EXPECT_EQ(served(client, "tasks/get"), 3);
  EXPECT_EQ(served(client, "tasks/cancel"), 0);

  // Input the task needs: asked through the same handler, answered with tasks/update.
  McpCallOptions asking;
  asking.onElicitation = answerName("Ada", nullptr);
  McpServerOptions options = cachingServer("");
  options.onElicitation = answerName("Grace", nullptr);
  McpClient withForms(options);
  EXPECT_EQ(textOf(withForms.callTool("asks", json::object(), asking)), "Hello, Ada");
  EXPECT_EQ(served(withForms, "tasks/update"), 1);

  std::string error = errorOf<McpError>([&] { client.callTool("failing", json::object()); });
  EXPECT_NE(error.find("task task-2 failed"), std::string::npos) << error;
  EXPECT_NE(error.find("it broke"), std::string::npos) << error;

  // Without the extension declared the server answers at once.
  McpServerOptions plain = cachingServer("");
  plain.tasks = false;
  McpClient without(plain);
  EXPECT_EQ(textOf(without.callTool("slow", json::object())), "slow without a task");
  EXPECT_EQ(without.stats().tasksFollowed, 0);
}

TEST(McpTasks, TheCallerStoppingCancelsTheTask) {
  McpClient client(cachingServer(""));
  std::stop_source stop;
  McpCallOptions call;
  call.cancel = stop.get_token();
  call.onTask = [&](const std::string&) { stop.request_stop(); };
  EXPECT_NE(errorOf<CancelledError>([&] { client.callTool("held", json::object(), call); }), "");
  EXPECT_EQ(client.stats().tasksCancelled, 1);
  EXPECT_EQ(served(client, "tasks/cancel"), 1);
}

TEST(McpTasks, PollsAreCapped) {
  McpServerOptions options = cachingServer("");
  options.maxTaskPolls = 3;
  McpClient client(options);
  std::string error = errorOf<ProtocolError>([&] { client.callTool("held", json::object()); });
  EXPECT_NE(error.find("did not end within 3 polls (maxTaskPolls)"), std::string::npos) << error;
  EXPECT_EQ(served(client, "tasks/get"), 3);
  EXPECT_EQ(served(client, "tasks/cancel"), 1);
}

// Through the registry: the task's id is noted with ToolContext::checkpoint as soon as it is
// known, and a call given it back in resumeFrom follows that task without calling the tool again.
TEST(McpTasks, ACheckpointedTaskIsResumedWithoutASecondCall) {
  auto registry = std::make_shared<ToolRegistry>();
  McpRegistration added = registry->addMcpServer("m", cachingServer("polls=2"));
  std::vector<json> noted;
  ToolExecutorOptions first;
  first.checkpoint = [&](const ToolContext& call, const json& handle) {
    EXPECT_EQ(call.toolCallId, "c1");
    noted.push_back(handle);
  };
  ToolResult done = ToolExecutor(registry, first).execute({"c1", "slow", "{}"});
  ASSERT_TRUE(done.success) << done.error;
  EXPECT_EQ(done.result, "task-1 done after 2 polls");
  ASSERT_EQ(noted.size(), 1u);
  EXPECT_EQ(noted[0], json({{"server", "m"}, {"task", "task-1"}}));

  ToolExecutorOptions again;
  again.resumeFrom = [&](const std::string& id) { return id == "c1" ? noted[0] : json(); };
  ToolResult resumed = ToolExecutor(registry, again).execute({"c1", "slow", "{}"});
  ASSERT_TRUE(resumed.success) << resumed.error;
  EXPECT_EQ(resumed.result, "task-1 done after 2 polls");  // the same task's result
  EXPECT_EQ(served(*added.client, "tools/call"), 1);       // "stats" counts itself after answering
}

// ---------------------------------------------------------------------------------------------
// subscriptions/listen: the server's tools/list_changed on a stream the client keeps open

// Waits on the server's side until its count of `key` reaches `atLeast` (tool "await").
void awaitCount(McpClient& client, const std::string& key, int atLeast) {
  McpCallOptions call;
  call.timeout = 10s;
  client.callTool("await", {{"key", key}, {"atLeast", atLeast}}, call);
}

McpServerOptions listeningHttp(const HttpTestServer& server) {
  McpServerOptions options;
  options.name = "listening";
  options.url = server.url();
  options.requestTimeout = 10s;
  return options;
}

TEST(McpListen, AChangeNotifiedOnTheStreamRefreshesTheRegistryAndClosingEndsTheStream) {
  HttpTestServer server("modern-http", "2026-07-28", "listen=yes");
  ASSERT_GT(server.port(), 0);
  McpClient observer(listeningHttp(server));  // no callback: it does not listen
  std::promise<std::vector<std::string>> refreshed;
  std::once_flag once;
  McpServerOptions options = listeningHttp(server);
  options.onToolsRefreshed = [&](const std::vector<std::string>& tools) {
    std::call_once(once, [&] { refreshed.set_value(tools); });
  };
  {
    ToolRegistry registry;
    McpRegistration added = registry.addMcpServer("m", options);
    EXPECT_FALSE(registry.has("extra"));
    awaitCount(observer, "subscriptions/listen", 1);  // the stream is open
    observer.callTool("grow", json::object());
    std::future<std::vector<std::string>> future = refreshed.get_future();
    ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
    std::vector<std::string> tools = future.get();
    EXPECT_NE(std::find(tools.begin(), tools.end(), "extra"), tools.end());
    EXPECT_TRUE(registry.has("extra"));  // read again, past the list's ttl of 60 s
    EXPECT_EQ(added.client->stats().listenStreams, 1);
  }  // the registry closes the client
  awaitCount(observer, "listen-closed", 1);
  EXPECT_EQ(observer.stats().listenStreams, 0);
}

TEST(McpListen, OverStdioTheStreamIsCancelledWhenTheClientCloses) {
  McpServerOptions options = cachingServer("listen=yes");
  std::promise<void> changed;
  std::once_flag once;
  auto client = std::make_unique<McpClient>(options);
  client->onToolsChanged([&] { std::call_once(once, [&] { changed.set_value(); }); });
  client->connect();
  awaitCount(*client, "subscriptions/listen", 1);
  client->callTool("grow", json::object());
  ASSERT_EQ(changed.get_future().wait_for(10s), std::future_status::ready);
  long pid = client->stats().processId;
  client->close();  // sends notifications/cancelled for the stream and joins its thread
  client.reset();
  EXPECT_TRUE(processGone(pid));
}

TEST(McpListen, AStreamThatKeepsBreakingIsGivenUpAfterTheCap) {
  HttpTestServer server("modern-http", "2026-07-28", "listen=drop");
  ASSERT_GT(server.port(), 0);
  McpClient observer(listeningHttp(server));
  McpServerOptions options = listeningHttp(server);
  options.maxListenReconnects = 2;
  options.listenBackoff = 10ms;
  McpClient client(options);
  client.onToolsChanged([] {});
  client.connect();
  awaitCount(observer, "subscriptions/listen", 3);
  // Bounded: the listener gives up right after the third stream broke.
  for (int i = 0; i < 1000 && !client.stats().listenGaveUp; ++i)
    std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(client.stats().listenGaveUp);
  EXPECT_EQ(client.stats().listenReconnects, 2);
  client.close();
  json counts =
      json::parse(observer.callTool("stats", json::object()).forModel().get<std::string>());
  EXPECT_EQ(counts["subscriptions/listen"], 3) << counts.dump();
}

// Past maxListenEvents notices the stream is ended (the server sees it close) and opened again.
TEST(McpListen, AStreamPastTheEventsCapIsEndedAndOpenedAgain) {
  HttpTestServer server("modern-http", "2026-07-28", "listen=flood");
  ASSERT_GT(server.port(), 0);
  McpClient observer(listeningHttp(server));
  McpServerOptions options = listeningHttp(server);
  options.maxListenEvents = 2;
  options.listenBackoff = 10ms;
  std::atomic<int> notices{0};
  McpClient client(options);
  client.onToolsChanged([&] { ++notices; });
  client.connect();
  // Without the cap the server would never see a stream end: these waits would time out.
  awaitCount(observer, "listen-closed", 1);         // the client ended the first stream
  awaitCount(observer, "subscriptions/listen", 2);  // and opened another
  client.close();
  json counts =
      json::parse(observer.callTool("stats", json::object()).forModel().get<std::string>());
  EXPECT_LE(notices, 2 * counts["subscriptions/listen"].get<int>()) << counts.dump();
  EXPECT_GE(notices, 2);  // the first stream's two
}

// ---------------------------------------------------------------------------------------------
// Tool annotations and approval

TEST(McpAnnotations, TheDestructivePolicyAsksForToolsNotMarkedSafe) {
  auto flags = [](McpApproval approval) {
    ToolRegistry registry;
    McpServerOptions options = testServer("annotated");
    options.approval = approval;
    registry.addMcpServer("annotated", options);
    std::string out;
    for (const char* name : {"read", "safe", "plain", "wipe"}) {
      auto info = registry.find(name);
      if (!info) return std::string("missing ") + name;
      out += std::string(name) + (info->options.requiresApproval ? "+ask" : "") +
             (info->options.idempotent ? "+idem" : "") + " ";
    }
    return out;
  };
  EXPECT_EQ(flags(McpApproval::Destructive), "read+idem safe+idem plain+ask wipe+ask ");
  EXPECT_EQ(flags(McpApproval::Never), "read+idem safe+idem plain wipe ");
  EXPECT_EQ(flags(McpApproval::Always), "read+ask+idem safe+ask+idem plain+ask wipe+ask ");
}

}  // namespace
}  // namespace parley

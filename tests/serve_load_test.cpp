// Load: 1 000 concurrent event-stream clients on one `parley serve` process (with one worker in
// it) against the mock. Every client receives every event of the run, in order, each once, and
// the whole streamed reply; the memory the service spends per idle client is measured (its
// RSS before and after they connect) and printed. `ctest -L load` runs it alone.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <fstream>
#include <thread>

#include "child_process.hpp"
#include "http_client.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/run_store.hpp"
#include "run_databases.hpp"
#include "sse_swarm.hpp"

namespace parley::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr size_t kClients = 1'000;

// The resident memory of a process, in KiB (VmRSS of /proc/PID/status).
long rssKiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  throw std::runtime_error("no VmRSS for " + std::to_string(pid));
}

// Until the service counts `n` open streams, at most 60 s.
bool waitForStreams(const std::string& base, size_t n, SseSwarm& swarm) {
  const std::string line = "parley_stream_clients " + std::to_string(n) + "\n";
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  bool found = false;
  std::string last;
  swarm.run(deadline, [&] {
    last = http("GET", base + "/metrics").body;
    found = last.find(line) != std::string::npos;
    return found;
  });
  if (!found) {
    const auto at = last.find("\nparley_stream_clients ");
    if (at != std::string::npos) std::cerr << last.substr(at, last.find('\n', at) - at) << "\n";
    std::cerr << "streams: " << swarm.lastError() << "\n";
  }
  return found;
}

TEST(ServeLoad, AThousandStreamsEachGetEveryEventOnce) {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  ASSERT_GE(files.rlim_cur, kClients + 100) << "the open-files limit is too low for the test";

  SqliteRunDb db;
  mock::MockOptions mockOptions;
  std::string reply;
  for (int i = 1; i <= 60; ++i)
    reply += (i > 1 ? " w" : "w") + std::to_string(i);
  mockOptions.script = mock::readScript(
      json{{"reply", {{"content", reply}}}, {"stream", {{"chunk_delay_ms", 5}}}}.dump());
  mock::MockServer mock(mockOptions);
  mock.start();
  RunStore(db.open());
  ChildProcess serve({PARLEY_CLI_PATH, "serve", "--db", db.url(), "--port", "0", "--workers", "1",
                      "--base-url", mock.baseUrl(), "--model", "parley-mock", "--api-key", "k"});
  const std::string base = serve.readLine().value_or("");
  ASSERT_EQ(base.rfind("http://", 0), 0u);
  ASSERT_EQ(http("POST", base + "/v1/threads", json{{"id", "load"}}.dump()).status, 201);

  SseSwarm swarm("llm_execution_completed");
  const long before = rssKiB(serve.pid());
  for (size_t i = 0; i < kClients; ++i)
    swarm.add(base + "/v1/threads/load/events");
  ASSERT_TRUE(waitForStreams(base, kClients, swarm));
  const long after = rssKiB(serve.pid());
  std::cout << "[ load ] " << kClients << " idle streams: RSS " << before << " KiB -> " << after
            << " KiB, " << (after - before) * 1024 / static_cast<long>(kClients)
            << " bytes per client\n";

  auto submitted = http("POST", base + "/v1/threads/load/runs", json{{"input", "go"}}.dump());
  ASSERT_EQ(submitted.status, 202) << submitted.body;
  ASSERT_TRUE(swarm.run(std::chrono::steady_clock::now() + 120s))
      << swarm.done() << " of " << kClients << " clients got the whole run";

  // Every client got the same events: 1..N in order, each once, and the whole reply.
  const auto& first = *swarm.clients().front();
  ASSERT_FALSE(first.ids.empty());
  for (size_t i = 0; i < first.ids.size(); ++i)
    ASSERT_EQ(first.ids[i], static_cast<int64_t>(i + 1));
  EXPECT_EQ(first.types.back(), "llm_execution_completed");
  std::string streamed;
  for (const auto& c : swarm.clients()) {
    ASSERT_EQ(c->ids, first.ids);
    ASSERT_EQ(c->types, first.types);
  }
  // The chunks' text, read back from the data lines of one client.
  size_t at = 0;
  while ((at = first.chunks.find("\"content\":\"", at)) != std::string::npos) {
    at += 11;
    const size_t end = first.chunks.find('"', at);
    streamed += first.chunks.substr(at, end - at);
    at = end;
  }
  EXPECT_EQ(streamed, reply);
  serve.kill(SIGTERM);
  EXPECT_EQ(serve.wait(), 0);
}

}  // namespace
}  // namespace parley::testing

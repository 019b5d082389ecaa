// The worker process of the run queue's multi-process tests (run_store_conformance.hpp).
//
//   run_store_worker sqlite|postgres TARGET drain WORKER
//     Claims runs (lease 30 s) until no unfinished run is left in the database. For each run it
//     appends one fenced turn, [the run's input..., assistant "done RUN"], finishes it completed
//     and prints "done RUN THREAD TOKEN"; a lost lease prints "lost RUN".
//   run_store_worker sqlite|postgres TARGET hold WORKER LEASE_MS
//     Claims one run with a short lease and prints "claimed RUN TOKEN"; then reads a line from
//     stdin and tries the fenced turn: prints "appended" or "lost: REASON".
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "parley/errors.hpp"
#include "parley/postgres_store.hpp"
#include "parley/run_store.hpp"

using namespace parley;

namespace {

std::shared_ptr<ConversationStore> open(const std::string& kind, const std::string& target) {
  if (kind == "sqlite") return openSqliteStore(target);
  return openPostgresStore(target);
}

// The turn a test worker commits for a run.
std::vector<Message> turnOf(const RunInfo& run) {
  std::vector<Message> turn = run.input;
  turn.push_back(Message::assistant("done " + run.id));
  return turn;
}

Claim claimOne(RunStore& runs, const std::string& worker, std::chrono::milliseconds lease) {
  for (;;) {
    if (auto claim = runs.claim(worker, lease)) return *claim;
    runs.waitForRuns(std::chrono::milliseconds(50));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: run_store_worker sqlite|postgres TARGET drain|hold WORKER [MS]\n");
    return 2;
  }
  const std::string kind = argv[1], target = argv[2], mode = argv[3], worker = argv[4];
  try {
    RunStore runs(open(kind, target));
    if (mode == "hold") {
      const auto lease = std::chrono::milliseconds(argc > 5 ? std::stol(argv[5]) : 300);
      Claim claim = claimOne(runs, worker, lease);
      std::printf("claimed %s %lld\n", claim.run.id.c_str(),
                  static_cast<long long>(claim.lease.token));
      std::fflush(stdout);
      std::string line;
      std::getline(std::cin, line);
      try {
        auto version = runs.threads().threadInfo(claim.lease.threadId)->version;
        runs.appendTurn(claim.lease, turnOf(claim.run), nullptr, version);
        std::printf("appended\n");
      } catch (const LeaseLost& e) {
        std::printf("lost: %s\n", e.what());
      }
      std::fflush(stdout);
      return 0;
    }
    for (;;) {
      auto claim = runs.claim(worker, std::chrono::seconds(30));
      if (!claim) {
        bool unfinished = false;
        for (RunStatus status : {RunStatus::Queued, RunStatus::Running, RunStatus::Waiting}) {
          unfinished = unfinished || !runs.listRuns({.status = status, .limit = 1}).empty();
        }
        if (!unfinished) return 0;
        runs.waitForRuns(std::chrono::milliseconds(20));
        continue;
      }
      try {
        auto version = runs.threads().threadInfo(claim->lease.threadId)->version;
        runs.appendTurn(claim->lease, turnOf(claim->run), nullptr, version);
        runs.finish(claim->lease, RunStatus::Completed);
        std::printf("done %s %s %lld\n", claim->run.id.c_str(), claim->lease.threadId.c_str(),
                    static_cast<long long>(claim->lease.token));
      } catch (const LeaseLost&) {
        std::printf("lost %s\n", claim->run.id.c_str());
      }
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "run_store_worker: %s\n", e.what());
    return 1;
  }
}

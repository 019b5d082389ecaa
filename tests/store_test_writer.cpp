// The writer process of the store crash and concurrency tests.
//
//   store_test_writer sqlite|postgres TARGET THREAD TURNS TAG [--wait-go]
//
// Appends TURNS turns to THREAD (which must exist), continuing after the last turn of TAG
// already stored. Turn k of TAG holds k % 3 + 1 messages whose contents are "TAG:k:j"; its state
// is {"last": "TAG:k", "storageSize": N}. Prints "committed k VERSION" once each turn is
// committed and "conflict k" when another writer got there first (it then re-reads the thread's
// version and tries again). With --wait-go it prints "ready" once it has read the thread's
// version and waits for a line on stdin before writing, so that two writers start together.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "parley/errors.hpp"
#include "parley/postgres_store.hpp"
#include "parley/store.hpp"

using namespace parley;

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: store_test_writer sqlite|postgres TARGET THREAD TURNS TAG\n");
    return 2;
  }
  const std::string kind = argv[1], target = argv[2], thread = argv[3], tag = argv[5];
  const long turns = std::stol(argv[4]);
  const bool waitGo = argc > 6 && std::string(argv[6]) == "--wait-go";
  try {
    std::unique_ptr<ConversationStore> store;
    if (kind == "sqlite") {
      store = openSqliteStore(target);
    } else {
      store = openPostgresStore(target);
    }
    ThreadData data = store->loadThread(thread);
    long next = 1;
    const std::string prefix = tag + ":";
    for (const auto& m : data.messages) {
      if (m.content.rfind(prefix, 0) == 0) {
        long k = std::stol(m.content.substr(prefix.size()));
        if (k + 1 > next) next = k + 1;
      }
    }
    int64_t version = data.info.version;
    int64_t count = data.info.messageCount;
    if (waitGo) {
      std::printf("ready\n");
      std::fflush(stdout);
      std::string line;
      std::getline(std::cin, line);
    }
    for (long done = 0; done < turns; ++done, ++next) {
      std::vector<Message> messages;
      const long n = next % 3 + 1;
      for (long j = 0; j < n; ++j) {
        std::string content = tag + ":" + std::to_string(next) + ":" + std::to_string(j);
        messages.push_back(j % 2 == 0 ? Message::user(content) : Message::assistant(content));
      }
      for (;;) {
        nlohmann::json state = {{"last", tag + ":" + std::to_string(next)},
                                {"storageSize", count + n}};
        try {
          version = store->appendTurn(thread, messages, state, version);
          count += n;
          std::printf("committed %ld %lld\n", next, static_cast<long long>(version));
          std::fflush(stdout);
          break;
        } catch (const StoreConflict&) {
          std::printf("conflict %ld\n", next);
          std::fflush(stdout);
          auto info = store->threadInfo(thread);
          if (!info) throw StoreError("the thread disappeared");
          version = info->version;
          count = info->messageCount;
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_test_writer: %s\n", e.what());
    return 1;
  }
  return 0;
}

// Cassettes: model traffic recorded at the HTTP seam (parley/transport.hpp) and replayed without
// the network (docs/cassettes.md). A cassette transport wraps the real one: in `record` mode it
// sends every request and writes the exchange to a directory (one JSON file per exchange: the
// request canonicalised, the reply's stream events with their timing or its body); in
// `replay-only` mode it answers from those files and never sends (a request with no recording
// is a CassetteMiss naming the first field that differs from the nearest recording); in
// `replay-or-record` mode it answers what it has and records what it has not. Works under
// every protocol, since every protocol client sends through the transport.
//
// The key of an exchange is the SHA-256 of the canonical request: method, URL path and query,
// the stream flag, the headers that are neither secret nor volatile, and the body with its keys
// sorted; secrets (credential headers, ClientOptions' key, `redactPatterns`) are redacted before
// the key is taken, so a key never depends on them and no file holds them.
//
// Owned by the client layer. Thread-safety: a cassette transport serves any number of calls at
// once (a mutex guards its occurrence counters and its directory index).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parley/cache_diagnostic.hpp"
#include "parley/errors.hpp"
#include "parley/transport.hpp"

namespace parley {

enum class CassetteMode {
  Record,          // send every request; write (overwrite) its exchange
  ReplayOnly,      // answer from the directory; a request without a recording is a CassetteMiss
  ReplayOrRecord,  // answer what is recorded, send and record the rest
};
// "record", "replay-only", "replay-or-record".
const char* toString(CassetteMode mode) noexcept;
// The mode a name gives; ValidationError naming `field` for any other name.
CassetteMode cassetteModeFromString(const std::string& name, const std::string& field);

struct CassetteOptions {
  std::string directory;  // created when recording
  CassetteMode mode = CassetteMode::ReplayOnly;
  // Replay: wait between stream events as long as the recording did (false: at once).
  bool realtime = false;
  // Regular expressions (ECMAScript) whose matches are redacted in every string of what is
  // written and keyed, besides the request's credential headers.
  std::vector<std::string> redactPatterns;
  // Caps. One exchange's file (request and reply) over maxExchangeBytes is not written: the call
  // fails with ValidationError; a file over it is not read. A directory of more than
  // maxExchanges files is refused.
  size_t maxExchangeBytes = size_t{16} << 20;
  size_t maxExchanges = 100'000;
};

// PARLEY_CASSETTES: "DIR" (replay-only) or "MODE:DIR" with a mode of toString(CassetteMode).
// nullopt when the variable is unset or empty; ValidationError for an unknown mode.
std::optional<CassetteOptions> cassetteOptionsFromEnv();

// A request a replay-only cassette has no recording of. `difference` is the first field in which
// it departs from the nearest recording (the cache diagnostic's comparison over request bodies,
// firstRequestDifference()); nullopt when the directory holds no recording to compare with.
class CassetteMiss : public ValidationError {
 public:
  CassetteMiss(const std::string& reason, std::optional<CacheDiagnostic::Difference> difference);
  const std::optional<CacheDiagnostic::Difference>& difference() const noexcept {
    return difference_;
  }

 private:
  std::optional<CacheDiagnostic::Difference> difference_;
};

// A transport that records or replays through `inner` (made lazily by `makeInner` when a request
// must be sent, so a replay never opens a connection). `secrets` are redacted besides the
// request's credential headers (the client's API key). Throws ValidationError for an empty
// directory, a bad pattern, or a directory over its caps.
std::shared_ptr<HttpTransport> makeCassetteTransport(
    CassetteOptions options, std::function<std::shared_ptr<HttpTransport>()> makeInner,
    std::vector<std::string> secrets = {});

}  // namespace parley

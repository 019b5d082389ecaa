// RunRequest: a run as a client asks for it, read by one reader whoever asks: the service's
// `POST /v1/threads/{id}/runs` reads its JSON body with readRunRequest(), and `parley submit`
// turns its flags into the same JSON and reads it with the same function, so both accept and
// refuse the same things with the same words (docs/service.md, "Submit a run").
//
// Thread-safety: free functions over values.
#pragma once

#include <vector>

#include "parley/json.hpp"
#include "parley/message.hpp"
#include "parley/run_store.hpp"

namespace parley {

struct RunRequest {
  std::vector<Message> input;  // one user message from a string, or messages as given
  SubmitOptions options;       // stream is on unless the body says "stream": false
};

// Reads {"input": "text" | [message...], "id", "profile", "system", "policy", "stream",
// "max_iterations", "tools", "metadata"}. A ValidationError names the body's key (`input`,
// `policy`, `max_iterations`, ...) and says what it must be. What the store checks itself (id
// length, the iteration cap) it checks again at submit().
RunRequest readRunRequest(const nlohmann::json& body);

}  // namespace parley

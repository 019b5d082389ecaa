// The OpenAI-compatible routes of `parley serve` (docs/service.md, "OpenAI-compatible
// endpoints"): GET /v1/models, POST /v1/chat/completions, POST /v1/responses and
// GET /v1/responses/{id}. Each request is a durable run on a thread of its own (or, for a
// response with previous_response_id, on a fork of the earlier response's thread), done by
// whatever worker claims it; the route follows the thread's event log and encodes those events
// (event_types.hpp) in OpenAI's shapes. Internal to src/service/.
//
// Thread-safety: the routes may run on any number of threads at once.
#pragma once

#include <httplib.h>

#include <memory>
#include <string_view>

#include "parley/run_store.hpp"
#include "service/service_state.hpp"

namespace parley::service {

// The routes share the service's state, which outlives them.
void installOpenAiRoutes(httplib::Server& server, ServiceState& state);

// Whether a request of these routes holds its connection while a run goes on (a thread of its
// own, as an event stream).
bool isOpenAiLongLived(std::string_view method, std::string_view path);

}  // namespace parley::service

// The routes of `parley serve`, one installer per resource (docs/service.md lists them). Each
// registers its handlers on the server; the handlers share the ServiceState, which outlives the
// server. Internal to src/service/.
#pragma once

#include "http/server.hpp"
#include "service/service_state.hpp"

namespace parley::service {

// /v1/threads: create, list, read, delete, fork, context operations (thread_routes.cpp).
void installThreadRoutes(http::Server& server, ServiceState& state);
// /v1/threads/{id}/runs and /v1/runs/{id}: submit, list, read, cancel, respond (run_routes.cpp).
void installRunRoutes(http::Server& server, ServiceState& state);
// /v1/threads/{id}/events: a thread's event log, followed or one page (event_routes.cpp).
void installEventRoutes(http::Server& server, ServiceState& state);
// The A2A 1.0 routes: /.well-known/agent-card.json, /a2a/jsonrpc, /a2a/rest (a2a_routes.cpp,
// docs/a2a.md).
void installA2aRoutes(http::Server& server, ServiceState& state);
bool isA2aLongLived(std::string_view method, std::string_view path);
// True for a request that holds its connection long (a followed event stream), which the HTTP
// front serves on a thread of its own.
bool isLongLivedRequest(std::string_view method, std::string_view target);

// The path pattern of one id segment.
inline const std::string kIdSegment = R"(([^/]+))";

}  // namespace parley::service

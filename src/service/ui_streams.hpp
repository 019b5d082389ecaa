// The UI streams of `parley serve` (docs/service.md, "UI streams"): a run's events of the one
// vocabulary (event_types.hpp) encoded as the Vercel AI SDK's UI message stream
// (`x-vercel-ai-ui-message-stream: v1`, what useChat reads) and as AG-UI events (what
// @ag-ui/client's HttpAgent reads). Both are read from the thread's event log, each SSE frame
// carrying the sequence number of the event it encodes as its `id:`, so a client resumes with
// Last-Event-ID; a tool approval or a question is a tool call waiting for the client's answer,
// which the next request carries.
//
//   POST /v1/ui/chat                    useChat's request: {id (the thread), messages, trigger,
//                                       model?}; answers the run's UI message stream
//   GET  /v1/ui/chat/{thread}/stream    the thread's active run again (resumeStream); 204: none
//   POST /v1/ag-ui                      AG-UI's RunAgentInput; answers the run's AG-UI events
//   GET  /v1/ag-ui/{thread}/stream      the thread's last run again (with Last-Event-ID)
//
// Internal to src/service/. Thread-safety: the routes may run on any number of threads at once.
#pragma once

#include <httplib.h>

#include <string_view>

#include "service/openai_endpoints.hpp"

namespace parley::service {

void installUiStreamRoutes(httplib::Server& server, ServiceState& state);

// Whether a request of these routes holds its connection while a run goes on.
bool isUiStreamLongLived(std::string_view method, std::string_view path);

}  // namespace parley::service

// The server's requests that a handler answers: elicitation/create (a form or a URL for the
// person) and sampling/createMessage (a model completion). The checks run on the thread reading
// the connection, before a handler thread is started; the run functions on that thread.
// Internal to parley (mcp_client.cpp).
#pragma once

#include <stop_token>
#include <string>

#include <nlohmann/json.hpp>

#include "parley/mcp.hpp"

namespace parley::detail {

// "" when the request is within the options' caps and well formed; else why not (sent to the
// server as a -32602 error, naming the cap).
std::string checkElicitation(const nlohmann::json& params, const McpServerOptions& options);
std::string checkSampling(const nlohmann::json& params, const McpServerOptions& options);

// Calls the handler and returns the result to send. Form answers get the schema's defaults for
// what they leave out (SEP-1034) and are checked against the schema. Throws CancelledError when
// the handler declined a sampling request, another Error for an answer that is not valid.
// `handler` asks (the options' onElicitation, or a call's own: McpCallOptions::onElicitation).
nlohmann::json runElicitation(const nlohmann::json& params, const McpServerOptions& options,
                              const McpElicitationHandler& handler, std::stop_token stop);
nlohmann::json runSampling(const nlohmann::json& params, const McpServerOptions& options,
                           std::stop_token stop);

// The form's values with the schema's defaults filled in for the properties left out.
nlohmann::json withElicitationDefaults(const nlohmann::json& schema, nlohmann::json content);

}  // namespace parley::detail

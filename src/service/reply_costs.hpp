// POST /v1/costs (docs/service.md): what replies cost, priced by the service's price table
// (ServiceOptions::prices) with the one rule of cost.hpp, for the chat page's cost per reply.
// Internal to src/service/.
//
// Thread-safety: the route may run on any number of threads at once.
#pragma once

#include <httplib.h>

#include <cstddef>

#include "service/openai_endpoints.hpp"

namespace parley::service {

inline constexpr size_t kMaxPricedReplies = 1'000;  // replies one request prices

void installReplyCostRoutes(httplib::Server& server, ServiceState& state);

}  // namespace parley::service

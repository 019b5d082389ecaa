// Thread titles for the service (docs/service.md): the title a thread gets from its first
// exchange (the first line of the first prompt, cut at kProposedTitleBytes), and
// `PATCH /v1/threads/{id}` ({"title"}, or {"title_from": text} for the title proposed from
// it) to rename one. Internal to src/service/.
//
// Thread-safety: pure function; the route may run on any number of threads at once.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <string>

#include "service/openai_endpoints.hpp"

namespace parley::service {

inline constexpr size_t kProposedTitleBytes = 80;

// The first non-empty line of `text`, trimmed, cut at kProposedTitleBytes on a character
// boundary ("…" marks a cut); control characters become spaces. "" for text with no line.
std::string proposedTitle(const std::string& text);

// Creates thread `id`, titled proposedTitle(firstPrompt), unless it exists.
void createTitledThread(RunStore& runs, const std::string& id, const std::string& firstPrompt);

void installThreadTitleRoutes(httplib::Server& server, ServiceState& state);

}  // namespace parley::service

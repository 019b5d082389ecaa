// A thread's title proposed by the model (`parley history title --generate`, `/title` in chat):
// the conversation's text, cut to a bounded excerpt, is sent with a request for a short title,
// and the reply is cleaned into one line (titleFromPrompt's rules: at most about 60 characters).
// The default title, set when a thread is made, stays the first prompt's start.
#pragma once

#include <span>
#include <string>

#include "parley/llm.hpp"

namespace parley::cli {

// At most this much of the conversation's text is sent (the start of each message, earliest
// first): a title needs the topic, not the whole thread.
inline constexpr size_t kTitleExcerptBytes = 6000;

// One model call on `client` (model: "" for the client's default). ValidationError when the
// conversation has no text; the call's errors otherwise; ProtocolError when the reply holds no
// usable title.
std::string proposeTitle(LlmClient& client, const std::string& model,
                         std::span<const Message> messages);

}  // namespace parley::cli

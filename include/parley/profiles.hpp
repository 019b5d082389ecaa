// Named endpoint settings (the executor's `profileId`): which server, which model, where the API
// key comes from, default request parameters and the endpoint's quirks.
//
// A profiles file is TOML, one table per profile:
//
//   [profiles.local]
//   base_url = "http://127.0.0.1:8080/v1"
//   model = "qwen2.5-7b-instruct"
//   api_key_env = "LOCAL_API_KEY"        # or api_key = "..." (not recommended in files)
//   headers = { "X-Team" = "agents" }
//   connect_timeout_ms = 10000           # request_timeout_ms, idle_timeout_ms likewise
//   max_retries = 2
//   max_event_bytes = 8388608            # max_response_bytes likewise
//   max_tokens_field = "max_tokens"      # or "max_completion_tokens" (the default)
//   include_usage = false                # stream_options.include_usage (default true)
//   empty_tool_call_content = "empty_string"   # "null" (default), "empty_string" or "omit"
//   protocol = "anthropic"               # "openai-chat" (default), "openai-responses"
//   default_max_tokens = 4096            # anthropic: max_tokens when a request sets none
//   anthropic_version = "2023-06-01"
//   prompt_cache = "automatic"           # anthropic breakpoints: "automatic", "off", "explicit"
//   prompt_cache_user_turns = 2          # automatic: the last N user turns (within 4 in all)
//   prompt_cache_ttl = "1h"              # "" = the API's default (5 minutes)
//   prompt_cache_key = "tenant-7"        # openai-chat / openai-responses: prompt_cache_key
//   responses_store = false              # openai-responses: store (false: stateless)
//   structured_output = "auto"           # auto | json_schema | json_object | tool
//   token_counting = "local"             # local | remote | remote-or-local (prompt_counter.hpp)
//   [profiles.local.parameters]          # sent with every request unless the request says
//   temperature = 0.2                    # otherwise
//
// Unknown keys are an error (a typo must not silently fall back to a default).
//
// Thread-safety: a ProfileRegistry may be used from many threads; every call is atomic.
// client() hands out one shared client per profile (of its protocol: makeClient()), so calls
// through a profile share its connection pool.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "parley/openai_client.hpp"

namespace parley {

class ProfileRegistry {
 public:
  // Adds or replaces the profile `name`. Returns *this for chaining. A replaced profile's
  // client is made anew on the next client(name). Throws ValidationError for an empty name.
  ProfileRegistry& add(const std::string& name, ClientOptions options);

  // The options of `name`. Throws ValidationError("profileId", "unknown profile \"x\" ...")
  // naming it and the known ones.
  ClientOptions get(const std::string& name) const;

  bool contains(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted

  // The client for `name`, made on first use and shared afterwards.
  std::shared_ptr<LlmClient> client(const std::string& name);

  // Reads every [profiles.NAME] table of a TOML file and adds it. Throws ValidationError naming
  // the file, the profile and the key for a bad file; on error nothing is added.
  ProfileRegistry& loadToml(const std::string& path);
  // The same from TOML text; `source` names it in errors.
  ProfileRegistry& loadTomlString(const std::string& text, const std::string& source = "profiles");

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, ClientOptions> profiles_;
  std::unordered_map<std::string, std::shared_ptr<LlmClient>> clients_;
};

}  // namespace parley

#include "parley/profiles.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "model/toml_json.hpp"

#include "parley/errors.hpp"
#include "parley/protocol.hpp"
#include "parley/toml.hpp"

namespace parley {

namespace {

using detail::tomlToJson;

class ProfileReader {
 public:
  ProfileReader(const toml::table& table, std::string field)
      : table_(table), field_(std::move(field)) {}

  std::string string(const char* key, std::string fallback) const {
    const toml::node* node = table_.get(key);
    if (!node) return fallback;
    if (auto v = node->value_exact<std::string>()) return *v;
    throw ValidationError(field_ + "." + key, "must be a string");
  }

  int64_t integer(const char* key, int64_t fallback, int64_t min) const {
    const toml::node* node = table_.get(key);
    if (!node) return fallback;
    auto v = node->value_exact<int64_t>();
    if (!v) throw ValidationError(field_ + "." + key, "must be an integer");
    if (*v < min) throw ValidationError(field_ + "." + key, "must be >= " + std::to_string(min));
    return *v;
  }

  bool boolean(const char* key, bool fallback) const {
    const toml::node* node = table_.get(key);
    if (!node) return fallback;
    if (auto v = node->value_exact<bool>()) return *v;
    throw ValidationError(field_ + "." + key, "must be true or false");
  }

  const toml::table* table(const char* key) const {
    const toml::node* node = table_.get(key);
    if (!node) return nullptr;
    if (auto* t = node->as_table()) return t;
    throw ValidationError(field_ + "." + key, "must be a table");
  }

  const std::string& field() const { return field_; }

 private:
  const toml::table& table_;
  std::string field_;
};

}  // namespace

const char* toString(TokenCounting counting) noexcept {
  switch (counting) {
    case TokenCounting::Remote:
      return "remote";
    case TokenCounting::RemoteOrLocal:
      return "remote-or-local";
    case TokenCounting::Local:
      break;
  }
  return "local";
}

TokenCounting tokenCountingFromString(const std::string& name, const std::string& field) {
  for (TokenCounting c :
       {TokenCounting::Local, TokenCounting::Remote, TokenCounting::RemoteOrLocal}) {
    if (name == toString(c)) return c;
  }
  throw ValidationError(
      field, "must be \"local\", \"remote\" or \"remote-or-local\" (got \"" + name + "\")");
}

namespace {

ClientOptions readProfile(const toml::table& table, const std::string& field) {
  static constexpr std::string_view kKeys[] = {"base_url",
                                               "model",
                                               "api_key",
                                               "api_key_env",
                                               "api_key_in_query",
                                               "headers",
                                               "connect_timeout_ms",
                                               "request_timeout_ms",
                                               "idle_timeout_ms",
                                               "stream_timeout_ms",
                                               "max_retries",
                                               "max_event_bytes",
                                               "max_response_bytes",
                                               "max_tokens_field",
                                               "include_usage",
                                               "empty_tool_call_content",
                                               "parameters",
                                               "protocol",
                                               "default_max_tokens",
                                               "anthropic_version",
                                               "prompt_cache",
                                               "prompt_cache_user_turns",
                                               "prompt_cache_ttl",
                                               "prompt_cache_key",
                                               "responses_store",
                                               "structured_output",
                                               "token_counting"};
  for (const auto& [key, value] : table) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key.str()) == std::end(kKeys)) {
      throw ValidationError(field + "." + std::string(key.str()), "unknown key");
    }
  }
  ProfileReader r(table, field);
  ClientOptions o;
  o.protocol = protocolFromString(r.string("protocol", "openai-chat"), field + ".protocol");
  o.baseUrl = r.string("base_url", o.baseUrl);
  o.model = r.string("model", o.model);
  o.apiKey = r.string("api_key", "");
  o.apiKeyEnv = r.string("api_key_env", "");
  o.apiKeyInQuery = r.boolean("api_key_in_query", o.apiKeyInQuery);
  if (const toml::table* headers = r.table("headers")) {
    for (const auto& [key, value] : *headers) {
      auto v = value.value_exact<std::string>();
      if (!v)
        throw ValidationError(field + ".headers." + std::string(key.str()), "must be a string");
      o.headers[std::string(key.str())] = *v;
    }
  }
  using std::chrono::milliseconds;
  o.connectTimeout = milliseconds(r.integer("connect_timeout_ms", o.connectTimeout.count(), 1));
  o.requestTimeout = milliseconds(r.integer("request_timeout_ms", o.requestTimeout.count(), 1));
  o.idleTimeout = milliseconds(r.integer("idle_timeout_ms", o.idleTimeout.count(), 1));
  o.streamTimeout = milliseconds(r.integer("stream_timeout_ms", o.streamTimeout.count(), 1));
  o.maxRetries = static_cast<int>(r.integer("max_retries", o.maxRetries, 0));
  o.maxEventBytes =
      static_cast<size_t>(r.integer("max_event_bytes", static_cast<int64_t>(o.maxEventBytes), 1));
  o.maxResponseBytes = static_cast<size_t>(
      r.integer("max_response_bytes", static_cast<int64_t>(o.maxResponseBytes), 1));
  const std::string maxTokens = r.string("max_tokens_field", "max_completion_tokens");
  if (maxTokens == "max_tokens") {
    o.maxTokensField = MaxTokensField::MaxTokens;
  } else if (maxTokens == "max_completion_tokens") {
    o.maxTokensField = MaxTokensField::MaxCompletionTokens;
  } else {
    throw ValidationError(field + ".max_tokens_field",
                          "must be \"max_tokens\" or \"max_completion_tokens\"");
  }
  o.includeUsage = r.boolean("include_usage", o.includeUsage);
  o.structuredOutput = structuredOutputModeFromString(r.string("structured_output", "auto"),
                                                      field + ".structured_output");
  const std::string empty = r.string("empty_tool_call_content", "null");
  if (empty == "null") {
    o.emptyToolCallContent = EmptyContent::Null;
  } else if (empty == "empty_string") {
    o.emptyToolCallContent = EmptyContent::EmptyString;
  } else if (empty == "omit") {
    o.emptyToolCallContent = EmptyContent::Omit;
  } else {
    throw ValidationError(field + ".empty_tool_call_content",
                          "must be \"null\", \"empty_string\" or \"omit\"");
  }
  o.defaultMaxTokens = r.integer("default_max_tokens", o.defaultMaxTokens, 1);
  o.anthropicVersion = r.string("anthropic_version", o.anthropicVersion);
  const std::string cache = r.string("prompt_cache", "automatic");
  if (cache == "automatic") {
    o.promptCache.mode = PromptCachePolicy::Mode::Automatic;
  } else if (cache == "off") {
    o.promptCache.mode = PromptCachePolicy::Mode::Off;
  } else if (cache == "explicit") {
    o.promptCache.mode = PromptCachePolicy::Mode::Explicit;
  } else {
    throw ValidationError(field + ".prompt_cache",
                          "must be \"automatic\", \"off\" or \"explicit\"");
  }
  o.promptCache.lastUserTurns =
      static_cast<int>(r.integer("prompt_cache_user_turns", o.promptCache.lastUserTurns, 0));
  o.promptCache.ttl = r.string("prompt_cache_ttl", o.promptCache.ttl);
  o.promptCacheKey = r.string("prompt_cache_key", o.promptCacheKey);
  o.responsesStore = r.boolean("responses_store", o.responsesStore);
  o.tokenCounting =
      tokenCountingFromString(r.string("token_counting", "local"), field + ".token_counting");
  if (o.tokenCounting != TokenCounting::Local && o.protocol == Protocol::OpenAiResponses) {
    throw ValidationError(field + ".token_counting",
                          "openai-responses has no counting route parley speaks; remote counting "
                          "is for anthropic (count_tokens) and openai-chat (llama.cpp /tokenize)");
  }
  if (const toml::table* parameters = r.table("parameters")) {
    o.defaultParameters = tomlToJson(*parameters, field + ".parameters");
  }
  if (o.baseUrl.rfind("http://", 0) != 0 && o.baseUrl.rfind("https://", 0) != 0) {
    throw ValidationError(field + ".base_url", "must start with http:// or https://");
  }
  return o;
}

}  // namespace

ProfileRegistry& ProfileRegistry::add(const std::string& name, ClientOptions options) {
  if (name.empty()) throw ValidationError("profileId", "a profile needs a name");
  std::lock_guard lock(mutex_);
  profiles_[name] = std::move(options);
  clients_.erase(name);
  return *this;
}

ClientOptions ProfileRegistry::get(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = profiles_.find(name);
  if (it != profiles_.end()) return it->second;
  std::vector<std::string> known;
  for (const auto& [key, value] : profiles_)
    known.push_back(key);
  std::sort(known.begin(), known.end());
  std::string list;
  for (const auto& k : known)
    list += (list.empty() ? "" : ", ") + k;
  throw ValidationError("profileId", "unknown profile \"" + name +
                                         "\" (known: " + (list.empty() ? "none" : list) + ")");
}

bool ProfileRegistry::contains(const std::string& name) const {
  std::lock_guard lock(mutex_);
  return profiles_.count(name) > 0;
}

std::vector<std::string> ProfileRegistry::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [key, value] : profiles_)
    out.push_back(key);
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<LlmClient> ProfileRegistry::client(const std::string& name) {
  ClientOptions options = get(name);
  std::lock_guard lock(mutex_);
  auto& slot = clients_[name];
  if (!slot) slot = makeClient(std::move(options));
  return slot;
}

namespace {

// The [profiles.NAME] tables of a config file, all checked before any is added.
void loadProfiles(ProfileRegistry& registry, const toml::table& root, const std::string& source) {
  for (const auto& [key, value] : root) {
    // [mcp.NAME] (MCP servers), [templates.NAME] and [aliases] tables belong to the command
    // line, which reads them itself.
    if (key.str() != "profiles" && key.str() != "mcp" && key.str() != "templates" &&
        key.str() != "aliases") {
      throw ValidationError(source + ": " + std::string(key.str()),
                            "unknown top-level key (profiles go in [profiles.NAME] tables, MCP "
                            "servers in [mcp.NAME], templates in [templates.NAME], model "
                            "aliases in [aliases])");
    }
  }
  std::vector<std::pair<std::string, ClientOptions>> loaded;
  if (const toml::node* profiles = root.get("profiles")) {
    const toml::table* table = profiles->as_table();
    if (!table) throw ValidationError(source + ": profiles", "must be a table");
    for (const auto& [name, node] : *table) {
      const std::string field = source + ": profiles." + std::string(name.str());
      const toml::table* profile = node.as_table();
      if (!profile) throw ValidationError(field, "must be a table");
      loaded.emplace_back(std::string(name.str()), readProfile(*profile, field));
    }
  }
  for (auto& [name, options] : loaded)
    registry.add(name, std::move(options));
}

}  // namespace

ProfileRegistry& ProfileRegistry::loadToml(const std::string& path) {
  loadProfiles(*this, detail::readTomlTable(path, "the profiles file", kMaxTomlFileBytes), path);
  return *this;
}

ProfileRegistry& ProfileRegistry::loadTomlString(const std::string& text,
                                                 const std::string& source) {
  loadProfiles(*this, detail::parseTomlTable(text, source), source);
  return *this;
}

}  // namespace parley

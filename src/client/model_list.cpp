#include "client/model_list.hpp"

#include <cctype>

#include "client/http_transport.hpp"
#include "model/percent_encode.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/openai_client.hpp"

namespace parley::detail {

void JsonReplyReader::onStreamEnd(const HttpReplyInfo&) {
  throw ProtocolError("the server's reply from " + url_ + " is an event stream, not JSON");
}

void JsonReplyReader::onBody(std::string_view body, const HttpReplyInfo&) {
  value_ = parseJson(body, {}, false);
  if (value_.is_discarded())
    throw ProtocolError("the server's reply from " + url_ + " is not JSON");
}

namespace {

std::string stringField(const nlohmann::json& item, const char* key) {
  auto it = item.find(key);
  return it != item.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const nlohmann::json& dataOf(const nlohmann::json& reply, const std::string& url) {
  auto it = reply.find("data");
  if (!reply.is_object() || it == reply.end() || !it->is_array()) {
    throw ProtocolError("the model list from " + url + " has no \"data\" array");
  }
  return *it;
}

nlohmann::json get(HttpTransport& transport, const std::string& url,
                   std::span<const std::string> headers,
                   std::optional<std::chrono::milliseconds> timeout, std::stop_token stopToken) {
  JsonReplyReader reader(redactUrl(url));
  transport.send(
      HttpRequest{url, {}, headers, false, timeout, std::move(stopToken), HttpMethod::Get}, reader);
  return std::move(reader.value());
}

void add(std::vector<ModelInfo>& models, ModelInfo info, const std::string& url) {
  if (info.id.empty())
    throw ProtocolError("the model list from " + url + " has a model without an id");
  if (models.size() >= kMaxListedModels) {
    throw ProtocolError("the model list from " + url + " is longer than " +
                        std::to_string(kMaxListedModels) + " models");
  }
  models.push_back(std::move(info));
}

// A page cursor in a query string.

constexpr int kMaxModelPages = 100;

}  // namespace

std::vector<ModelInfo> listOpenAiModels(HttpTransport& transport, const std::string& baseUrl,
                                        std::span<const std::string> headers,
                                        std::optional<std::chrono::milliseconds> timeout,
                                        std::stop_token stopToken) {
  const std::string url = joinUrl(baseUrl, "/models");
  const nlohmann::json reply = get(transport, url, headers, timeout, std::move(stopToken));
  std::vector<ModelInfo> models;
  for (const nlohmann::json& item : dataOf(reply, redactUrl(url))) {
    if (!item.is_object()) continue;
    ModelInfo info;
    info.id = stringField(item, "id");
    info.ownedBy = stringField(item, "owned_by");
    if (auto it = item.find("created"); it != item.end() && it->is_number_integer()) {
      info.created =
          std::chrono::system_clock::time_point(std::chrono::seconds(it->get<int64_t>()));
    }
    info.raw = item;
    add(models, std::move(info), redactUrl(url));
  }
  return models;
}

std::vector<ModelInfo> listAnthropicModels(HttpTransport& transport, const std::string& baseUrl,
                                           std::span<const std::string> headers,
                                           std::optional<std::chrono::milliseconds> timeout,
                                           std::stop_token stopToken) {
  std::vector<ModelInfo> models;
  std::string after;
  for (int page = 0; page < kMaxModelPages; ++page) {
    const std::string url = joinUrl(baseUrl, "/models") + "?limit=1000" +
                            (after.empty() ? "" : "&after_id=" + percentEncode(after));
    const nlohmann::json reply = get(transport, url, headers, timeout, stopToken);
    for (const nlohmann::json& item : dataOf(reply, redactUrl(url))) {
      if (!item.is_object()) continue;
      ModelInfo info;
      info.id = stringField(item, "id");
      info.displayName = stringField(item, "display_name");
      info.raw = item;
      add(models, std::move(info), redactUrl(url));
    }
    const bool more = reply.value("has_more", false);
    const std::string last = stringField(reply, "last_id");
    if (!more || last.empty() || last == after) return models;
    after = last;
  }
  throw ProtocolError("the model list from " + redactUrl(joinUrl(baseUrl, "/models")) +
                      " goes on for more than " + std::to_string(kMaxModelPages) + " pages");
}

std::vector<ModelInfo> listGeminiModels(HttpTransport& transport, const std::string& baseUrl,
                                        std::span<const std::string> headers,
                                        std::optional<std::chrono::milliseconds> timeout,
                                        std::stop_token stopToken) {
  std::vector<ModelInfo> models;
  std::string token;
  for (int page = 0; page < kMaxModelPages; ++page) {
    const std::string url = joinUrl(baseUrl, "/models") + "?pageSize=1000" +
                            (token.empty() ? "" : "&pageToken=" + percentEncode(token));
    const nlohmann::json reply = get(transport, url, headers, timeout, stopToken);
    auto list = reply.find("models");
    if (!reply.is_object() || (list != reply.end() && !list->is_array())) {
      throw ProtocolError("the model list from " + redactUrl(url) + " has no \"models\" array");
    }
    for (const nlohmann::json& item : list == reply.end() ? nlohmann::json::array() : *list) {
      if (!item.is_object()) continue;
      ModelInfo info;
      info.id = stringField(item, "name");
      if (info.id.rfind("models/", 0) == 0) info.id.erase(0, 7);
      info.displayName = stringField(item, "displayName");
      info.raw = item;
      add(models, std::move(info), redactUrl(url));
    }
    const std::string next = stringField(reply, "nextPageToken");
    if (next.empty() || next == token) return models;
    token = next;
  }
  throw ProtocolError("the model list from " + redactUrl(joinUrl(baseUrl, "/models")) +
                      " goes on for more than " + std::to_string(kMaxModelPages) + " pages");
}

}  // namespace parley::detail

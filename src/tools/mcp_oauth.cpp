// McpOAuth: discovery, registration, the authorization code flow with PKCE, refresh and the
// token file. The order of discovery follows the MCP authorization specification (2025-11-25):
// the protected resource metadata from the challenge's resource_metadata, else at the path-based
// then the root well-known URI; the authorization server's metadata at the RFC 8414 then the
// OpenID Connect URIs (path-aware); without protected resource metadata, the 2025-03-26 rules
// (the MCP server's origin is the authorization server, with /authorize, /token and /register
// as fallbacks when it publishes no metadata).
#include "tools/mcp_oauth.hpp"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "model/base64url.hpp"
#include "model/percent_encode.hpp"
#include "model/sha256.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/part.hpp"

namespace parley::detail {

using nlohmann::json;
using std::chrono::milliseconds;
using SystemClock = std::chrono::system_clock;

namespace {

constexpr std::size_t kMaxTokenFileBytes = std::size_t{1} << 20;
constexpr int kMaxDocumentDepth = 16;
constexpr int kExpirySlackSeconds = 30;  // refresh a token this long before it expires

std::string randomToken(std::size_t bytes) {
  std::string buffer(bytes, '\0');
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(buffer.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ConnectionError(std::string("getrandom failed: ") + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
  return detail::base64UrlEncode(buffer);
}

std::string percentDecode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size() + 0 && std::isxdigit(text[i + 1]) &&
               std::isxdigit(text[i + 2])) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string formEncode(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    if (!out.empty()) out += '&';
    out += percentEncode(name) + "=" + percentEncode(value);
  }
  return out;
}

// The query parameters of a URL (the first of each name).
std::map<std::string, std::string> queryOf(std::string_view url) {
  std::map<std::string, std::string> out;
  std::size_t question = url.find('?');
  if (question == std::string_view::npos) return out;
  std::string_view query = url.substr(question + 1);
  query = query.substr(0, query.find('#'));
  while (!query.empty()) {
    std::size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    std::size_t eq = pair.find('=');
    std::string name = percentDecode(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : percentDecode(pair.substr(eq + 1));
    out.emplace(std::move(name), std::move(value));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

// scheme://host[:port] and the path (without query and fragment) of an http(s) URL.
struct UrlParts {
  std::string origin;
  std::string path;
};

UrlParts splitUrl(const std::string& url, const std::string& what) {
  std::size_t scheme = url.find("://");
  if (scheme == std::string::npos ||
      (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0))
    throw ProtocolError(what + " is not an http(s) URL: " + url.substr(0, 200));
  std::size_t pathStart = url.find_first_of("/?#", scheme + 3);
  UrlParts parts;
  parts.origin = url.substr(0, pathStart);
  if (pathStart != std::string::npos && url[pathStart] == '/') {
    std::size_t end = url.find_first_of("?#", pathStart);
    parts.path =
        url.substr(pathStart, end == std::string::npos ? std::string::npos : end - pathStart);
  }
  while (!parts.path.empty() && parts.path.back() == '/')
    parts.path.pop_back();
  std::string lowered = parts.origin;
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  parts.origin = lowered;
  return parts;
}

std::string withoutFragment(const std::string& url) {
  return url.substr(0, url.find('#'));
}

std::vector<std::string> splitScopes(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string scope;
  while (in >> scope)
    out.push_back(scope);
  return out;
}

std::string joinScopes(const std::vector<std::string>& scopes) {
  std::string out;
  for (const std::string& scope : scopes)
    out += (out.empty() ? "" : " ") + scope;
  return out;
}

std::string stringOf(const json& object, const char* key) {
  auto found = object.find(key);
  return found != object.end() && found->is_string() ? found->get<std::string>() : std::string();
}

std::vector<std::string> stringsOf(const json& object, const char* key) {
  std::vector<std::string> out;
  auto found = object.find(key);
  if (found == object.end() || !found->is_array()) return out;
  for (const json& item : *found)
    if (item.is_string()) out.push_back(item.get<std::string>());
  return out;
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// --- a small HTTP client for the authorization server (never follows redirects) ---------------

struct Reply {
  long status = 0;
  std::string body;
  std::string location;
};

struct Transfer {
  std::string body;
  std::string location;
  std::size_t maxBytes = 0;
  bool tooLarge = false;
  std::stop_token cancel;
};

size_t onBody(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  if (transfer->body.size() + size * count > transfer->maxBytes) {
    transfer->tooLarge = true;
    return 0;
  }
  transfer->body.append(data, size * count);
  return size * count;
}

size_t onHeaderLine(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  std::string_view line(data, size * count);
  constexpr std::string_view kLocation = "location:";
  if (line.size() > kLocation.size()) {
    std::string name(line.substr(0, kLocation.size()));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name == kLocation) {
      std::string_view value = line.substr(kLocation.size());
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
        value.remove_prefix(1);
      while (!value.empty() &&
             (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
        value.remove_suffix(1);
      transfer->location = std::string(value);
    }
  }
  return size * count;
}

int onProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<Transfer*>(user)->cancel.stop_requested() ? 1 : 0;
}

Reply httpExchange(const std::string& method, const std::string& url,
                   const std::vector<std::string>& headerLines, const std::string& body,
                   std::size_t maxBytes, milliseconds timeout, std::stop_token cancel,
                   const std::string& what) {
  CURL* easy = curl_easy_init();
  if (!easy) throw ConnectionError("libcurl could not be initialised");
  curl_slist* headers = nullptr;
  for (const std::string& line : headerLines)
    headers = curl_slist_append(headers, line.c_str());
  Transfer transfer;
  transfer.maxBytes = maxBytes;
  transfer.cancel = std::move(cancel);
  char errorBuffer[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy, CURLOPT_USERAGENT, "parley/" PARLEY_VERSION);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errorBuffer);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &onBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &onHeaderLine);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, &onProgress);
  curl_easy_setopt(easy, CURLOPT_XFERINFODATA, &transfer);
  curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
  if (method == "POST") {
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  CURLcode code = curl_easy_perform(easy);
  Reply reply;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &reply.status);
  std::string message = errorBuffer[0] ? errorBuffer : curl_easy_strerror(code);
  curl_slist_free_all(headers);
  curl_easy_cleanup(easy);
  if (transfer.tooLarge)
    throw ProtocolError(what + " at " + url + " is larger than " + std::to_string(maxBytes) +
                        " bytes (maxDocumentBytes)");
  if (code == CURLE_OPERATION_TIMEDOUT)
    throw TimeoutError(what + " at " + url + ": no answer within " +
                       std::to_string(timeout.count()) + " ms (httpTimeout)");
  if (code == CURLE_ABORTED_BY_CALLBACK) throw CancelledError(what + " was cancelled");
  if (code != CURLE_OK) throw ConnectionError(what + " at " + url + ": " + message);
  reply.body = std::move(transfer.body);
  reply.location = std::move(transfer.location);
  return reply;
}

// A JSON object from a 2xx answer, or nullopt for another status.
std::optional<json> jsonObject(const Reply& reply, const std::string& what,
                               const std::string& url) {
  if (reply.status / 100 != 2) return std::nullopt;
  json value = parseJson(reply.body, {.maxDepth = kMaxDocumentDepth}, false);
  if (value.is_discarded() || !value.is_object())
    throw ProtocolError(what + " at " + url + " is not a JSON object");
  return value;
}

// The error an authorization server answered with: its `error` and `error_description`.
[[noreturn]] void failWith(const Reply& reply, const std::string& what) {
  HttpError::Details details;
  details.status = static_cast<int>(reply.status);
  json body = parseJson(reply.body, {.maxDepth = kMaxDocumentDepth}, false);
  std::string text = what + " failed";
  if (body.is_object()) {
    std::string error = stringOf(body, "error");
    std::string description = stringOf(body, "error_description");
    if (!error.empty()) text += ": " + error;
    if (!description.empty()) text += " (" + description.substr(0, 300) + ")";
  }
  details.apiMessage = text;
  throw HttpError(details);
}

}  // namespace

BearerChallenge parseBearerChallenge(std::string_view header) {
  BearerChallenge challenge;
  std::size_t at = 0;
  // Skip the scheme ("Bearer"); the parameters follow as name="value" or name=token, by commas.
  while (at < header.size() && header[at] == ' ')
    ++at;
  std::size_t schemeEnd = header.find(' ', at);
  if (schemeEnd == std::string_view::npos) return challenge;
  at = schemeEnd;
  while (at < header.size()) {
    while (at < header.size() && (header[at] == ' ' || header[at] == ','))
      ++at;
    std::size_t eq = header.find('=', at);
    if (eq == std::string_view::npos) break;
    std::string name(header.substr(at, eq - at));
    while (!name.empty() && name.back() == ' ')
      name.pop_back();
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    at = eq + 1;
    std::string value;
    if (at < header.size() && header[at] == '"') {
      ++at;
      while (at < header.size() && header[at] != '"') {
        if (header[at] == '\\' && at + 1 < header.size()) ++at;
        value += header[at++];
      }
      ++at;
    } else {
      std::size_t end = header.find(',', at);
      value =
          std::string(header.substr(at, end == std::string_view::npos ? header.npos : end - at));
      while (!value.empty() && value.back() == ' ')
        value.pop_back();
      at = end == std::string_view::npos ? header.size() : end;
    }
    if (name == "error") challenge.error = value;
    if (name == "scope") challenge.scope = value;
    if (name == "resource_metadata") challenge.resourceMetadata = value;
  }
  return challenge;
}

// --- the state of one server's sign-in
// --------------------------------------------------------------

struct McpOAuth::State {
  std::string server;  // McpServerOptions::name, for messages
  std::string serverUrl;
  McpOAuthOptions options;
  std::mutex mutex;

  // What discovery found (kept for the life of the client).
  bool discovered = false;
  std::string resource;
  std::vector<std::string> scopesSupported;  // the protected resource's
  std::string authorizationEndpoint, tokenEndpoint, registrationEndpoint;
  std::vector<std::string> authMethods;  // token_endpoint_auth_methods_supported
  bool cimdSupported = false;
  // RFC 9207: the issuer the metadata was found for, and whether it promises `iss` in the
  // authorization response ("" when the 2025-03-26 fallbacks were used).
  std::string issuer;
  bool issSupported = false;

  // The client and its tokens (kept in the token file when there is one). A registered client
  // belongs to the issuer that registered it (`clientIssuer`, "" when unknown): credentials are
  // not portable across authorization servers (SEP-2352).
  std::string clientId, clientSecret, authMethod, clientIssuer;
  std::string accessToken, refreshToken;
  std::vector<std::string> grantedScopes;
  int64_t expiresAt = 0;  // Unix seconds; 0: unknown

  std::string who() const { return "MCP server \"" + server + "\""; }

  explicit State(std::atomic<bool>& flag) : signingIn(flag) {}
  std::atomic<bool>& signingIn;  // McpOAuth::signingIn_

  Reply get(const std::string& url, const std::string& what, std::stop_token cancel) {
    return httpExchange("GET", url, {"Accept: application/json"}, "", options.maxDocumentBytes,
                        options.httpTimeout, std::move(cancel), who() + ": " + what);
  }

  // --- discovery --------------------------------------------------------------------------------

  std::optional<json> firstDocument(const std::vector<std::string>& urls, const std::string& what,
                                    std::stop_token cancel) {
    for (const std::string& url : urls) {
      Reply reply = get(url, what, cancel);
      if (auto document = jsonObject(reply, who() + ": " + what, url)) return document;
    }
    return std::nullopt;
  }

  // RFC 8414 / OpenID Connect discovery for an issuer, path-aware (2025-11-25).
  std::optional<json> authorizationServerMetadata(const std::string& issuer,
                                                  std::stop_token cancel) {
    UrlParts parts = splitUrl(issuer, "the authorization server");
    std::vector<std::string> urls;
    if (parts.path.empty()) {
      urls = {parts.origin + "/.well-known/oauth-authorization-server",
              parts.origin + "/.well-known/openid-configuration"};
    } else {
      urls = {parts.origin + "/.well-known/oauth-authorization-server" + parts.path,
              parts.origin + "/.well-known/openid-configuration" + parts.path,
              parts.origin + parts.path + "/.well-known/openid-configuration"};
    }
    return firstDocument(urls, "authorization server metadata", cancel);
  }

  // `fromResource`: `where` is an issuer the protected resource named (RFC 8414 section 3.3: the
  // metadata's issuer must be the same string), not the 2025-03-26 fallback of the origin.
  void takeMetadata(const json& metadata, const std::string& where, bool fromResource) {
    std::string named = stringOf(metadata, "issuer");
    if (fromResource && metadata.contains("issuer") && named != where)
      throw ProtocolError(who() + ": the authorization server metadata found for " +
                          where.substr(0, 200) + " names another issuer, " + named.substr(0, 200));
    issuer = fromResource ? where : std::string();
    auto iss = metadata.find("authorization_response_iss_parameter_supported");
    issSupported = iss != metadata.end() && iss->is_boolean() && iss->get<bool>();
    authorizationEndpoint = stringOf(metadata, "authorization_endpoint");
    tokenEndpoint = stringOf(metadata, "token_endpoint");
    registrationEndpoint = stringOf(metadata, "registration_endpoint");
    if (authorizationEndpoint.empty() || tokenEndpoint.empty())
      throw ProtocolError(who() + ": the authorization server metadata of " + where +
                          " has no authorization_endpoint or token_endpoint");
    splitUrl(authorizationEndpoint, "authorization_endpoint");
    splitUrl(tokenEndpoint, "token_endpoint");
    if (!registrationEndpoint.empty()) splitUrl(registrationEndpoint, "registration_endpoint");
    authMethods = stringsOf(metadata, "token_endpoint_auth_methods_supported");
    auto cimd = metadata.find("client_id_metadata_document_supported");
    cimdSupported = cimd != metadata.end() && cimd->is_boolean() && cimd->get<bool>();
    // PKCE is required; a server that says which methods it supports must support S256.
    std::vector<std::string> methods = stringsOf(metadata, "code_challenge_methods_supported");
    if (metadata.contains("code_challenge_methods_supported") && !contains(methods, "S256"))
      throw ProtocolError(who() + ": the authorization server " + where +
                          " does not support PKCE with S256 (code_challenge_methods_supported)");
  }

  void discover(const BearerChallenge& challenge, std::stop_token cancel) {
    UrlParts server = splitUrl(serverUrl, "the server URL");
    std::optional<json> resourceMetadata;
    if (!challenge.resourceMetadata.empty()) {
      splitUrl(challenge.resourceMetadata, "resource_metadata");
      resourceMetadata =
          firstDocument({challenge.resourceMetadata}, "protected resource metadata", cancel);
    } else {
      std::vector<std::string> urls;
      if (!server.path.empty())
        urls.push_back(server.origin + "/.well-known/oauth-protected-resource" + server.path);
      urls.push_back(server.origin + "/.well-known/oauth-protected-resource");
      resourceMetadata = firstDocument(urls, "protected resource metadata", cancel);
    }
    resource = withoutFragment(serverUrl);
    if (resourceMetadata) {
      std::vector<std::string> issuers = stringsOf(*resourceMetadata, "authorization_servers");
      if (issuers.empty())
        throw ProtocolError(who() +
                            ": its protected resource metadata names no "
                            "authorization_servers");
      std::string named = stringOf(*resourceMetadata, "resource");
      if (!named.empty()) {
        // The metadata must be about this server: same origin, and a path that contains ours.
        UrlParts parts = splitUrl(named, "the protected resource");
        if (parts.origin != server.origin ||
            server.path.compare(0, parts.path.size(), parts.path) != 0)
          throw ProtocolError(who() + ": its protected resource metadata is for " +
                              named.substr(0, 200) + ", not " + serverUrl);
        resource = withoutFragment(named);
      }
      scopesSupported = stringsOf(*resourceMetadata, "scopes_supported");
      std::optional<json> metadata = authorizationServerMetadata(issuers.front(), cancel);
      if (!metadata)
        throw ProtocolError(who() + ": no authorization server metadata for " +
                            issuers.front().substr(0, 200));
      takeMetadata(*metadata, issuers.front(), true);
    } else {
      // 2025-03-26: the MCP server's origin is the authorization server.
      if (std::optional<json> metadata = authorizationServerMetadata(server.origin, cancel)) {
        takeMetadata(*metadata, server.origin, false);
      } else {
        authorizationEndpoint = server.origin + "/authorize";
        tokenEndpoint = server.origin + "/token";
        registrationEndpoint = server.origin + "/register";
        authMethods.clear();
      }
    }
    discovered = true;
  }

  // --- the client
  // ----------------------------------------------------------------------------------

  // The token endpoint authentication method for a client with or without a secret.
  std::string chooseMethod(bool hasSecret) const {
    if (!hasSecret) return "none";
    if (authMethods.empty() || contains(authMethods, "client_secret_basic"))
      return "client_secret_basic";
    if (contains(authMethods, "client_secret_post")) return "client_secret_post";
    return "client_secret_basic";
  }

  void ensureClient(std::stop_token cancel) {
    if (!options.clientId.empty()) {
      clientId = options.clientId;
      clientSecret = options.clientSecret;
      authMethod = chooseMethod(!clientSecret.empty());
      return;
    }
    if (cimdSupported && !options.clientMetadataUrl.empty()) {
      clientId = options.clientMetadataUrl;
      clientSecret.clear();
      authMethod = "none";
      return;
    }
    if (!clientId.empty()) return;  // registered before (this run or the token file)
    if (registrationEndpoint.empty())
      throw ValidationError("mcp." + server + ".oauth",
                            "the authorization server offers no dynamic client registration; "
                            "give a pre-registered client id");
    std::string wanted = "none";
    if (!authMethods.empty() && !contains(authMethods, "none"))
      wanted = contains(authMethods, "client_secret_basic") ? "client_secret_basic"
                                                            : "client_secret_post";
    json request = {{"client_name", options.clientName},
                    {"redirect_uris", {options.redirectUri}},
                    {"grant_types", {"authorization_code", "refresh_token"}},
                    {"response_types", {"code"}},
                    {"token_endpoint_auth_method", wanted},
                    // A program on the user's machine with a loopback redirect (OpenID Connect's
                    // "native"; 2026-07-28 asks for it, SEP-837; earlier servers ignore it).
                    {"application_type", "native"}};
    Reply reply = httpExchange("POST", registrationEndpoint,
                               {"Content-Type: application/json", "Accept: application/json"},
                               request.dump(), options.maxDocumentBytes, options.httpTimeout,
                               cancel, who() + ": client registration");
    std::optional<json> registered =
        jsonObject(reply, who() + ": the client registration", registrationEndpoint);
    if (!registered) failWith(reply, who() + ": client registration");
    clientId = stringOf(*registered, "client_id");
    if (clientId.empty())
      throw ProtocolError(who() + ": the client registration answer has no client_id");
    clientSecret = stringOf(*registered, "client_secret");
    std::string method = stringOf(*registered, "token_endpoint_auth_method");
    authMethod = method.empty() ? chooseMethod(!clientSecret.empty()) : method;
    clientIssuer = issuer;
  }

  // After a discovery: when the protected resource now names another authorization server than
  // the one the client was registered with, that client and its tokens are dropped, so that the
  // next sign-in registers anew there and no credential of the old server is shown to the new.
  void forgetClientOfAnotherIssuer() {
    if (clientIssuer.empty() || issuer.empty()) {
      if (!clientId.empty() && clientIssuer.empty()) clientIssuer = issuer;  // an older token file
      return;
    }
    if (clientIssuer == issuer) return;
    if (options.clientId.empty()) {
      clientId.clear();
      clientSecret.clear();
      authMethod.clear();
    }
    clientIssuer = issuer;
    accessToken.clear();
    refreshToken.clear();
    grantedScopes.clear();
    expiresAt = 0;
  }

  // Adds the client's authentication to a token request.
  void authenticate(std::vector<std::pair<std::string, std::string>>& form,
                    std::vector<std::string>& headers) const {
    if (authMethod == "client_secret_basic" && !clientSecret.empty()) {
      headers.push_back("Authorization: Basic " +
                        base64Encode(percentEncode(clientId) + ":" + percentEncode(clientSecret)));
      return;
    }
    form.emplace_back("client_id", clientId);
    if (authMethod == "client_secret_post" && !clientSecret.empty())
      form.emplace_back("client_secret", clientSecret);
  }

  // --- tokens
  // ----------------------------------------------------------------------------------------

  void tokenRequest(std::vector<std::pair<std::string, std::string>> form,
                    const std::vector<std::string>& askedScopes, std::stop_token cancel,
                    const std::string& what) {
    std::vector<std::string> headers = {"Content-Type: application/x-www-form-urlencoded",
                                        "Accept: application/json"};
    authenticate(form, headers);
    Reply reply =
        httpExchange("POST", tokenEndpoint, headers, formEncode(form), options.maxDocumentBytes,
                     options.httpTimeout, std::move(cancel), who() + ": " + what);
    std::optional<json> answer = jsonObject(reply, who() + ": the token answer", tokenEndpoint);
    if (!answer) failWith(reply, who() + ": " + what);
    std::string token = stringOf(*answer, "access_token");
    std::string type = stringOf(*answer, "token_type");
    std::transform(type.begin(), type.end(), type.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (token.empty() || (type != "bearer" && !type.empty()))
      throw ProtocolError(who() + ": the token answer has no bearer access_token");
    accessToken = token;
    std::string refresh = stringOf(*answer, "refresh_token");
    if (!refresh.empty()) refreshToken = refresh;
    auto expiresIn = answer->find("expires_in");
    expiresAt = 0;
    if (expiresIn != answer->end() && expiresIn->is_number() && expiresIn->get<double>() > 0 &&
        expiresIn->get<double>() < 1e9) {
      expiresAt =
          std::chrono::duration_cast<std::chrono::seconds>(SystemClock::now().time_since_epoch())
              .count() +
          static_cast<int64_t>(expiresIn->get<double>());
    }
    std::string scope = stringOf(*answer, "scope");
    grantedScopes = scope.empty() ? askedScopes : splitScopes(scope);
    save();
  }

  bool expired() const {
    if (expiresAt == 0) return false;
    int64_t now =
        std::chrono::duration_cast<std::chrono::seconds>(SystemClock::now().time_since_epoch())
            .count();
    return now + kExpirySlackSeconds >= expiresAt;
  }

  // True when a refresh token got a new access token.
  bool refresh(std::stop_token cancel) {
    if (refreshToken.empty() || tokenEndpoint.empty() || clientId.empty()) return false;
    try {
      tokenRequest({{"grant_type", "refresh_token"},
                    {"refresh_token", refreshToken},
                    {"resource", resource}},
                   grantedScopes, std::move(cancel), "refreshing the token");
      return true;
    } catch (const HttpError&) {
      // The refresh token is no longer good (expired, revoked): sign in again.
      refreshToken.clear();
      accessToken.clear();
      save();
      return false;
    }
  }

  void signIn(const std::vector<std::string>& scopes, std::stop_token cancel) {
    if (!options.authorize)
      throw ValidationError("mcp." + server + ".oauth",
                            "the server asks for a sign-in and there is no way to show one");
    ensureClient(cancel);
    std::string verifier = randomToken(32);
    std::string challenge = detail::base64UrlEncode(sha256(verifier));
    std::string state = randomToken(16);
    std::vector<std::pair<std::string, std::string>> query = {{"response_type", "code"},
                                                              {"client_id", clientId},
                                                              {"redirect_uri", options.redirectUri},
                                                              {"code_challenge", challenge},
                                                              {"code_challenge_method", "S256"},
                                                              {"state", state},
                                                              {"resource", resource}};
    if (!scopes.empty()) query.emplace_back("scope", joinScopes(scopes));
    McpAuthorizationRequest request;
    request.server = server;
    request.url = authorizationEndpoint +
                  (authorizationEndpoint.find('?') == std::string::npos ? "?" : "&") +
                  formEncode(query);
    request.redirectUri = options.redirectUri;
    request.state = state;
    signingIn.store(true);
    std::string back;
    try {
      back = options.authorize(request, cancel);
    } catch (...) {
      signingIn.store(false);
      throw;
    }
    signingIn.store(false);
    std::map<std::string, std::string> answer = queryOf(back);
    if (answer.contains("error")) {
      HttpError::Details details;
      details.status = 401;
      details.apiMessage = who() + ": the sign-in was refused: " + answer["error"].substr(0, 100) +
                           (answer.contains("error_description")
                                ? " (" + answer["error_description"].substr(0, 300) + ")"
                                : "");
      throw HttpError(details);
    }
    if (answer["state"] != state)
      throw ProtocolError(who() +
                          ": the sign-in came back with another state (a forged redirect?)");
    if (answer["code"].empty())
      throw ProtocolError(who() + ": the sign-in came back without an authorization code");
    // RFC 9207 (2026-07-28): an `iss` must be the issuer asked, compared as a string; a server
    // that promises one must send it. Either failure may be a mix-up attack: no code is redeemed.
    if (answer.contains("iss") && !issuer.empty() && answer["iss"] != issuer)
      throw ProtocolError(who() + ": the sign-in came back from issuer " +
                          answer["iss"].substr(0, 200) + ", not " + issuer.substr(0, 200));
    if (!answer.contains("iss") && issSupported)
      throw ProtocolError(who() +
                          ": the sign-in came back without the iss its authorization server "
                          "promises (authorization_response_iss_parameter_supported)");
    tokenRequest({{"grant_type", "authorization_code"},
                  {"code", answer["code"]},
                  {"redirect_uri", options.redirectUri},
                  {"code_verifier", verifier},
                  {"resource", resource}},
                 scopes, std::move(cancel), "the token request");
  }

  // --- the token file
  // -------------------------------------------------------------------------------

  json readFile() const {
    std::error_code error;
    auto size = std::filesystem::file_size(options.tokenFile, error);
    if (error) return json::object();
    if (size > kMaxTokenFileBytes)
      throw ValidationError(options.tokenFile, "the token file is larger than 1 MiB");
    std::ifstream in(options.tokenFile, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    json all = parseJson(text.str(), {}, false);
    return all.is_object() ? all : json::object();
  }

  void load() {
    if (options.tokenFile.empty()) return;
    json all = readFile();
    auto entry = all.find(serverUrl);
    if (entry == all.end() || !entry->is_object()) return;
    accessToken = stringOf(*entry, "access_token");
    refreshToken = stringOf(*entry, "refresh_token");
    grantedScopes = splitScopes(stringOf(*entry, "scope"));
    if (auto at = entry->find("expires_at"); at != entry->end() && at->is_number_integer())
      expiresAt = at->get<int64_t>();
    if (options.clientId.empty()) {
      clientId = stringOf(*entry, "client_id");
      clientSecret = stringOf(*entry, "client_secret");
      authMethod = stringOf(*entry, "token_endpoint_auth_method");
      clientIssuer = stringOf(*entry, "issuer");
    }
    tokenEndpoint = stringOf(*entry, "token_endpoint");
    resource = stringOf(*entry, "resource");
  }

  // Written to a temporary file created 0600, then renamed over the old one.
  void save() const {
    if (options.tokenFile.empty()) return;
    json all = readFile();
    all[serverUrl] = {{"access_token", accessToken},
                      {"refresh_token", refreshToken},
                      {"scope", joinScopes(grantedScopes)},
                      {"expires_at", expiresAt},
                      {"client_id", clientId},
                      {"client_secret", clientSecret},
                      {"token_endpoint_auth_method", authMethod},
                      {"issuer", clientIssuer},
                      {"token_endpoint", tokenEndpoint},
                      {"resource", resource}};
    std::string text = all.dump(2) + "\n";
    std::string temporary = options.tokenFile + ".tmp" + randomToken(6);
    int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
      throw ValidationError(options.tokenFile,
                            std::string("cannot write the token file: ") + std::strerror(errno));
    std::size_t written = 0;
    while (written < text.size()) {
      ssize_t n = ::write(fd, text.data() + written, text.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      written += static_cast<std::size_t>(n);
    }
    bool ok = written == text.size() && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok || ::rename(temporary.c_str(), options.tokenFile.c_str()) != 0) {
      ::unlink(temporary.c_str());
      throw ValidationError(options.tokenFile, "cannot write the token file");
    }
  }
};

McpOAuth::McpOAuth(std::string serverName, std::string serverUrl, McpOAuthOptions options)
    : state_(std::make_unique<State>(signingIn_)) {
  state_->server = std::move(serverName);
  state_->serverUrl = std::move(serverUrl);
  state_->options = std::move(options);
  state_->load();
}

McpOAuth::~McpOAuth() = default;

std::string McpOAuth::authorization(std::stop_token cancel) {
  std::lock_guard lock(state_->mutex);
  if (state_->accessToken.empty()) return "";
  if (state_->expired() && !state_->refresh(std::move(cancel))) return "";
  return "Bearer " + state_->accessToken;
}

std::string McpOAuth::held() const {
  std::lock_guard lock(state_->mutex);
  return state_->accessToken.empty() ? "" : "Bearer " + state_->accessToken;
}

void McpOAuth::challenged(int status, const std::string& wwwAuthenticate,
                          const std::string& sentAuthorization, int& attempts,
                          std::stop_token cancel) {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  // Another request got a new token meanwhile: try that one first.
  std::string current = s.accessToken.empty() ? "" : "Bearer " + s.accessToken;
  if (!current.empty() && current != sentAuthorization) return;
  BearerChallenge challenge = parseBearerChallenge(wwwAuthenticate);
  bool stepUp = status == 403 && challenge.error == "insufficient_scope";
  // A challenge that names the resource's metadata again may point at another authorization
  // server: found before a refresh, so that no token or client of the old one is sent to it.
  if (s.discovered && !challenge.resourceMetadata.empty()) {
    s.discover(challenge, cancel);
    s.forgetClientOfAnotherIssuer();
  }
  // An expired or revoked access token: a refresh token may do without a person.
  if (!stepUp && !sentAuthorization.empty() && s.refresh(cancel)) return;
  if (++attempts > s.options.maxAuthorizations) {
    HttpError::Details details;
    details.status = status;
    details.apiMessage = s.who() + " refused the request after " +
                         std::to_string(s.options.maxAuthorizations) +
                         " sign-ins (maxAuthorizations)" +
                         (challenge.error.empty() ? "" : ": " + challenge.error.substr(0, 100));
    throw HttpError(details);
  }
  if (!s.discovered) {
    s.discover(challenge, cancel);
    s.forgetClientOfAnotherIssuer();
  }
  // Scopes: the configured ones; else the challenge's (with those granted before, for a
  // step-up); else all the protected resource supports; else none.
  std::vector<std::string> scopes = s.options.scopes;
  if (scopes.empty()) {
    if (!challenge.scope.empty()) {
      scopes = splitScopes(challenge.scope);
      if (stepUp) {
        for (const std::string& granted : s.grantedScopes)
          if (!contains(scopes, granted)) scopes.push_back(granted);
      }
    } else {
      scopes = s.scopesSupported;
    }
  }
  s.signIn(scopes, std::move(cancel));
}

}  // namespace parley::detail

namespace parley {

std::string mcpFollowAuthorizationRedirect(const McpAuthorizationRequest& request,
                                           std::chrono::milliseconds timeout) {
  detail::Reply reply = detail::httpExchange("GET", request.url, {}, "", 64 << 10, timeout, {},
                                             "MCP server \"" + request.server + "\": the sign-in");
  if (reply.status / 100 != 3 || reply.location.empty())
    throw ProtocolError("MCP server \"" + request.server + "\": the sign-in page answered HTTP " +
                        std::to_string(reply.status) +
                        " rather than a redirect; it needs a person (a browser)");
  return reply.location;
}

}  // namespace parley

// --- the browser's way back: a one-request HTTP listener on the loopback address
// -------------------

namespace parley {

std::string mcpAwaitBrowserSignIn(const McpAuthorizationRequest& request,
                                  const std::function<void(const std::string& url)>& show,
                                  std::chrono::milliseconds timeout, std::stop_token cancel) {
  constexpr std::size_t kMaxRequestBytes = 16 << 10;
  const std::string& redirect = request.redirectUri;
  std::string rest;
  for (const char* prefix : {"http://127.0.0.1:", "http://localhost:"}) {
    if (redirect.rfind(prefix, 0) == 0) rest = redirect.substr(std::strlen(prefix));
  }
  std::size_t slash = rest.find('/');
  int port = 0;
  try {
    port = std::stoi(rest.substr(0, slash));
  } catch (const std::exception&) {
    port = 0;
  }
  if (rest.empty() || port <= 0 || port > 65535)
    throw ValidationError("oauth.redirectUri",
                          "a browser sign-in needs http://127.0.0.1:PORT/PATH, not " + redirect);
  std::string path = slash == std::string::npos ? "/" : rest.substr(slash);

  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw ConnectionError("cannot open a socket for the sign-in");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd, 4) != 0)
    throw ConnectionError("cannot listen on 127.0.0.1:" + std::to_string(port) +
                          " for the sign-in: " + std::strerror(errno));
  show(request.url);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (cancel.stop_requested()) throw CancelledError("the sign-in was cancelled");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw TimeoutError("MCP server \"" + request.server + "\": nobody signed in within " +
                         std::to_string(timeout.count() / 1000) + " s");
    pollfd wait{fd, POLLIN, 0};
    if (::poll(&wait, 1, static_cast<int>(std::min<int64_t>(left.count(), 250))) <= 0) continue;
    int client = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    Closer clientCloser{client};
    // The browser's request line and headers, read with a deadline of their own.
    std::string text;
    char buffer[4096];
    auto readUntil = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (text.find("\r\n\r\n") == std::string::npos && text.size() < kMaxRequestBytes) {
      pollfd in{client, POLLIN, 0};
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
          readUntil - std::chrono::steady_clock::now());
      if (wait.count() <= 0 || ::poll(&in, 1, static_cast<int>(wait.count())) <= 0) break;
      ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
    }
    std::size_t space = text.find(' ');
    std::size_t end = space == std::string::npos ? space : text.find(' ', space + 1);
    std::string target = end == std::string::npos ? "" : text.substr(space + 1, end - space - 1);
    bool ours = text.rfind("GET ", 0) == 0 && target.substr(0, target.find('?')) == path;
    std::string page =
        ours ? "Signed in. You may close this tab and go back to parley.\n" : "Not found.\n";
    std::string reply = std::string(ours ? "HTTP/1.1 200 OK" : "HTTP/1.1 404 Not Found") +
                        "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                        std::to_string(page.size()) + "\r\nConnection: close\r\n\r\n" + page;
    [[maybe_unused]] ssize_t sent = ::send(client, reply.data(), reply.size(), MSG_NOSIGNAL);
    if (ours) return "http://127.0.0.1:" + std::to_string(port) + target;
  }
}

}  // namespace parley

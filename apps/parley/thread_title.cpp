#include "thread_title.hpp"

#include <chrono>

#include "cli_store.hpp"
#include "parley/errors.hpp"

namespace parley::cli {
namespace {

constexpr size_t kPerMessageBytes = 1500;

// The first `limit` bytes of `text`, not inside a UTF-8 character.
std::string prefix(const std::string& text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
    --end;
  return text.substr(0, end) + "...";
}

}  // namespace

std::string proposeTitle(LlmClient& client, const std::string& model,
                         std::span<const Message> messages) {
  std::string excerpt;
  for (const Message& m : messages) {
    if ((m.role != Role::User && m.role != Role::Assistant) || m.content.empty()) continue;
    std::string part = std::string(toString(m.role)) + ": " + prefix(m.content, kPerMessageBytes);
    if (excerpt.size() + part.size() + 2 > kTitleExcerptBytes) break;
    excerpt += part + "\n\n";
  }
  if (excerpt.empty()) throw ValidationError("thread", "has no prompt or reply to title");

  ChatRequest request;
  request.model = model;
  request.messages = {
      Message::system("You name conversations. Reply with a title of at most six words for the "
                      "conversation the user gives: the title alone, no quotes, no punctuation "
                      "at the end."),
      Message::user(excerpt)};
  request.maxTokens = 32;
  request.timeout = std::chrono::seconds(60);
  const ChatResult result = client.generate(request);

  // Markdown and quotes a model adds around a title come off; then one line of bounded length.
  std::string text = result.message.content;
  const auto strip = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '"' || c == '\'' || c == '#' ||
           c == '*' || c == '`' || c == '.';
  };
  size_t begin = 0;
  while (begin < text.size() && strip(text[begin]))
    ++begin;
  text.erase(0, begin);
  if (const size_t newline = text.find('\n'); newline != std::string::npos) text.resize(newline);
  while (!text.empty() && strip(text.back()))
    text.pop_back();
  std::string title = titleFromPrompt(text);
  if (title.empty())
    throw ProtocolError("the model proposed no title (it replied \"" +
                        prefix(result.message.content, 200) + "\")");
  return title;
}

}  // namespace parley::cli

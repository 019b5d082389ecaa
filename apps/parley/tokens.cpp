// parley tokens: count (or list) the tokens of files, stdin, or a chat request.
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/message.hpp"
#include "parley/tokens.hpp"

namespace parley::cli {

namespace {

struct TokensOptions {
  std::string encoding{kDefaultEncoding};
  bool ids = false;
  bool allowSpecial = false;
  std::string chat;
  std::vector<std::string> files;
};

std::string readAll(std::istream& in, const std::string& what) {
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("cannot read " + what);
  return text;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  return readAll(in, path);
}

void warnIfEstimate(const TokenCounter& counter) {
  if (!counter.exact()) {
    std::cerr << "parley: no " << counter.encodingName()
              << " vocabulary found; counts are estimates (code points / 2.5)\n";
  }
}

int runTokens(const TokensOptions& o) {
  TokenCounter counter(o.encoding);
  if (!o.chat.empty()) {
    nlohmann::json request;
    try {
      request = parseJson(readFile(o.chat));
    } catch (const ProtocolError& e) {
      throw ValidationError("--chat", o.chat + ": " + e.what());
    }
    if (!request.is_object() || !request.contains("messages")) {
      throw ValidationError("--chat",
                            o.chat + " needs an object {\"messages\": [...], \"tools\": [...]}");
    }
    std::vector<Message> messages = messagesFromJson(request["messages"]);
    nlohmann::json tools = request.value("tools", nlohmann::json());
    warnIfEstimate(counter);
    std::cout << countChatTokens(messages, tools, counter).tokens << "\n";
    return kExitOk;
  }
  if (o.ids && !counter.exact()) {
    throw Error("--ids needs the " + o.encoding + " vocabulary (run scripts/fetch-vocab.sh)");
  }
  EncodeOptions encodeOptions;
  encodeOptions.allowAllSpecial = o.allowSpecial;
  auto handle = [&](const std::string& text, const std::string* label) {
    if (o.ids) {
      std::vector<TokenId> ids = counter.encoding()->encode(text, encodeOptions);
      std::string line = "[";
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) line += ',';
        line += std::to_string(ids[i]);
      }
      line += "]\n";
      std::cout << line;
      return;
    }
    int64_t n = counter.exact()
                    ? static_cast<int64_t>(counter.encoding()->count(text, encodeOptions))
                    : counter.count(text).tokens;
    std::cout << n;
    if (label) std::cout << '\t' << *label;
    std::cout << '\n';
  };
  warnIfEstimate(counter);
  if (o.files.empty()) {
    std::ios::sync_with_stdio(false);
    handle(readAll(std::cin, "standard input"), nullptr);
  } else {
    for (const std::string& f : o.files)
      handle(readFile(f), o.files.size() > 1 ? &f : nullptr);
  }
  return kExitOk;
}

}  // namespace

void addTokensCommand(CLI::App& app, int& exitCode) {
  auto options = std::make_shared<TokensOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokens", "Count the tokens of files (stdin when none), or of a chat request");
  cmd->add_option("--encoding", options->encoding, "cl100k_base or o200k_base")
      ->capture_default_str()
      ->check(CLI::IsMember(knownEncodingNames()));
  cmd->add_flag("--ids", options->ids, "Print each file's token ids as one JSON array per line");
  cmd->add_flag("--allow-special", options->allowSpecial,
                "Read special tokens such as <|endoftext|> as such (default: plain text)");
  cmd->add_option(
         "--chat", options->chat,
         "Count the prompt tokens of a chat request {\"messages\": [...], \"tools\": [...]}")
      ->check(CLI::ExistingFile);
  cmd->add_option("files", options->files,
                  "Files to count (with several: \"count<TAB>file\" lines)")
      ->check(CLI::ExistingFile);
  cmd->callback([options, &exitCode] { exitCode = runTokens(*options); });
}

}  // namespace parley::cli

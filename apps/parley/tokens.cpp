// parley tokens: count (or list) the tokens of files, stdin, or a chat request.
//
// Fast on large inputs: a file is mapped, not copied (the kernel reads it once), and a long text
// is counted on every core (EncodeOptions::threads; the counts are exactly those of one thread).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "endpoint.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/message.hpp"
#include "parley/prompt_counter.hpp"
#include "parley/tokens.hpp"

namespace parley::cli {

namespace {

struct TokensOptions {
  std::string encoding{kDefaultEncoding};
  bool ids = false;
  bool allowSpecial = false;
  std::string chat;
  std::vector<std::string> files;
  bool remote = false;    // --chat counted by the endpoint too
  EndpointArgs endpoint;  // the endpoint --remote asks
};

// The bytes of a file or of stdin: a regular file is mapped read-only; anything else (a
// pipe, a terminal) is read in large blocks.
class InputText {
 public:
  // fd is closed by the destructor unless it is stdin.
  InputText(int fd, const std::string& what) : fd_(fd) {
    struct stat info {};
    if (::fstat(fd, &info) != 0) throw Error("cannot read " + what + ": " + std::strerror(errno));
    if (S_ISREG(info.st_mode) && info.st_size > 0) {
      size_ = static_cast<size_t>(info.st_size);
      void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (mapped != MAP_FAILED) {
        map_ = mapped;
        ::madvise(map_, size_, MADV_SEQUENTIAL);
        return;
      }
    }
    size_ = 0;
    std::size_t capacity = std::size_t{1} << 20;
    for (;;) {
      data_.resize(capacity);
      const ssize_t n = ::read(fd, data_.data() + size_, capacity - size_);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error("cannot read " + what + ": " + std::strerror(errno));
      if (n == 0) break;
      size_ += static_cast<std::size_t>(n);
      if (size_ == capacity) capacity *= 2;
    }
    data_.resize(size_);
  }
  ~InputText() {
    if (map_) ::munmap(map_, size_);
    if (fd_ != STDIN_FILENO) ::close(fd_);
  }
  InputText(const InputText&) = delete;
  InputText& operator=(const InputText&) = delete;

  std::string_view text() const {
    return map_ ? std::string_view(static_cast<const char*>(map_), size_) : std::string_view(data_);
  }

 private:
  int fd_;
  void* map_ = nullptr;
  std::size_t size_ = 0;
  std::string data_;
};

std::unique_ptr<InputText> openFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path + ": " + std::strerror(errno));
  return std::make_unique<InputText>(fd, path);
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
      request = parseJson(openFile(o.chat)->text());
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
    const int64_t local = countChatTokens(messages, tools, counter).tokens;
    if (!o.remote) {
      std::cout << local << "\n";
      return kExitOk;
    }
    // The endpoint's own count of the same request (docs/cost.md, "Remote counting").
    RemotePromptCounterOptions remote;
    remote.client = resolveEndpoint(o.endpoint);
    remote.api = remoteCountApiFor(remote.client.protocol, "--protocol");
    ChatRequest chat;
    chat.model = request.value("model", "");
    chat.messages = std::move(messages);
    if (!tools.is_null()) chat.tools = std::move(tools);
    const PromptCount count = RemotePromptCounter(std::move(remote)).count(chat);
    std::cout << "local\t" << local << "\nremote\t" << count.tokens << "\n";
    return kExitOk;
  }
  if (o.remote) {
    throw ValidationError("--remote", "counts a chat request: give it with --chat FILE");
  }
  if (o.ids && !counter.exact()) {
    throw Error("--ids needs the " + o.encoding + " vocabulary (run scripts/fetch-vocab.sh)");
  }
  EncodeOptions encodeOptions;
  encodeOptions.allowAllSpecial = o.allowSpecial;
  encodeOptions.threads = 0;  // every core for a long text
  auto handle = [&](std::string_view text, const std::string* label) {
    if (o.ids) {
      std::vector<TokenId> ids = counter.encoding()->encode(text, encodeOptions);
      std::string line(ids.size() * 8 + 3, '\0');  // at most 6 digits and a comma per id
      char* out = line.data();
      *out++ = '[';
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) *out++ = ',';
        out = std::to_chars(out, line.data() + line.size(), ids[i]).ptr;
      }
      *out++ = ']';
      *out++ = '\n';
      std::cout.write(line.data(), out - line.data());
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
    handle(InputText(STDIN_FILENO, "standard input").text(), nullptr);
  } else {
    for (const std::string& f : o.files)
      handle(openFile(f)->text(), o.files.size() > 1 ? &f : nullptr);
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
  cmd->add_flag("--remote", options->remote,
                "With --chat: also ask the endpoint to count it (anthropic: count_tokens; "
                "openai-chat: llama.cpp's /apply-template and /tokenize) and print "
                "\"local<TAB>N\" and \"remote<TAB>N\"");
  addEndpointOptions(*cmd, options->endpoint);
  cmd->add_option("files", options->files,
                  "Files to count (with several: \"count<TAB>file\" lines)")
      ->check(CLI::ExistingFile);
  cmd->callback([options, &exitCode] { exitCode = runTokens(*options); });
}

}  // namespace parley::cli

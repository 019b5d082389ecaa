#include "prompt_input.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "parley/errors.hpp"

namespace parley::cli {
namespace fs = std::filesystem;
namespace {

std::string mib(size_t bytes) {
  if (bytes % (size_t{1} << 20) != 0) return std::to_string(bytes) + " bytes";
  return std::to_string(bytes >> 20) + " MiB";
}

// git's test: a NUL byte in the first 8 000 bytes makes a file binary.
bool looksBinary(const std::string& text) {
  return text.find('\0', 0) < std::min<size_t>(text.size(), 8000);
}

std::string fenced(const std::string& label, const std::string& text) {
  // A fence longer than any run of backticks in the text, so the text cannot close it.
  size_t longest = 0;
  size_t run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(std::max<size_t>(3, longest + 1), '`');
  std::string block = label + ":\n" + fence + "\n" + text;
  if (!text.empty() && text.back() != '\n') block += "\n";
  return block + fence + "\n";
}

}  // namespace

std::string readPipedStdin(const PromptInputLimits& limits) {
  if (::isatty(STDIN_FILENO)) return "";
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, stdin)) > 0) {
    if (text.size() + n > limits.maxStdinBytes) {
      throw ValidationError("stdin", "more than the cap of " + mib(limits.maxStdinBytes) +
                                         " was piped in (give large inputs as files with -f)");
    }
    text.append(buffer, n);
  }
  return text;
}

std::string filesAsText(const std::vector<std::string>& paths, std::vector<std::string>& skipped,
                        const PromptInputLimits& limits) {
  std::string out;
  size_t files = 0;
  size_t total = 0;
  auto add = [&](const fs::path& path, bool named) {
    if (++files > limits.maxFiles) {
      throw ValidationError("-f", "more than " + std::to_string(limits.maxFiles) +
                                      " files (name fewer files or a smaller directory)");
    }
    std::string text = readPartFile(path, limits.maxFileBytes);
    if (looksBinary(text)) {
      if (named) throw ValidationError(path.string(), "is a binary file");
      skipped.push_back(path.string());
      --files;
      return;
    }
    total += text.size();
    if (total > limits.maxTotalFileBytes) {
      throw ValidationError(
          "-f", "the files add up to more than the cap of " + mib(limits.maxTotalFileBytes));
    }
    if (!out.empty()) out += "\n";
    out += fenced(path.string(), text);
  };

  for (const std::string& name : paths) {
    const fs::path path(name);
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (error || !fs::exists(status)) throw ValidationError(name, "no such file or directory");
    if (fs::is_regular_file(status)) {
      add(path, true);
      continue;
    }
    if (!fs::is_directory(status)) throw ValidationError(name, "is not a file or a directory");
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(path, fs::directory_options::none, error), end;
    if (error) throw ValidationError(name, "cannot be listed: " + error.message());
    for (; it != end; it.increment(error)) {
      if (error) throw ValidationError(name, "cannot be listed: " + error.message());
      const std::string leaf = it->path().filename().string();
      if (!leaf.empty() && leaf[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path());
      if (found.size() > limits.maxFiles) break;  // add() reports it
    }
    std::sort(found.begin(), found.end());
    for (const fs::path& file : found)
      add(file, false);
  }
  return out;
}

std::vector<Part> attachmentParts(const std::vector<std::string>& paths, const PartLimits& limits) {
  std::vector<Part> parts;
  parts.reserve(paths.size());
  for (const std::string& path : paths)
    parts.push_back(Part::attachmentFile(path, limits));
  return parts;
}

Message promptMessage(const std::string& prompt, std::vector<Part> attachments,
                      const PartLimits& limits) {
  if (attachments.empty()) return Message::user(prompt);
  if (!prompt.empty()) attachments.insert(attachments.begin(), Part::text(prompt));
  return Message::user(std::move(attachments), limits);
}

std::string composePrompt(const std::string& argument, const std::string& piped,
                          const std::string& files) {
  std::string prompt = argument;
  for (const std::string* part : {&piped, &files}) {
    if (part->empty()) continue;
    if (!prompt.empty()) prompt += prompt.back() == '\n' ? "\n" : "\n\n";
    prompt += *part;
  }
  while (!prompt.empty() && prompt.back() == '\n')
    prompt.pop_back();
  return prompt;
}

}  // namespace parley::cli

// What a prompt is made of besides its argument: text piped on stdin, files given with -f
// (ask) or /file (chat) as text, and attachments (--attach, /attach) as message parts. Each input
// has a cap; going past it is a ValidationError that names the input and the cap, never a silent
// cut.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "parley/message.hpp"

namespace parley::cli {

struct PromptInputLimits {
  size_t maxStdinBytes = 8 << 20;      // piped text
  size_t maxFileBytes = 1 << 20;       // one file
  size_t maxTotalFileBytes = 8 << 20;  // all files of one prompt
  size_t maxFiles = 200;               // files of one prompt, directories expanded
};

// Reads stdin to its end when it is not a terminal (a pipe or a file); "" on a terminal.
std::string readPipedStdin(const PromptInputLimits& limits = {});

// The files at `paths` (a directory adds its regular files, recursively, in name order, skipping
// hidden entries and binary files, which are listed in `skipped`) as fenced, labelled blocks:
//
//   notes.txt:
//   ```
//   ...
//   ```
//
// A path that does not exist, cannot be read or, named directly, is binary (a NUL byte, or not
// UTF-8) is a ValidationError naming it.
std::string filesAsText(const std::vector<std::string>& paths, std::vector<std::string>& skipped,
                        const PromptInputLimits& limits = {});

// The files at `paths` as message parts (an image, wav or mp3 audio, or a file, by their sniffed
// type; "-" reads stdin), capped by `limits` (part.hpp). A path that cannot be read, or is over a
// cap, is a ValidationError naming it.
std::vector<Part> attachmentParts(const std::vector<std::string>& paths,
                                  const PartLimits& limits = {});

// The user message of a prompt: plain text, or the text followed by the attachments as parts.
Message promptMessage(const std::string& prompt, std::vector<Part> attachments,
                      const PartLimits& limits = {});

// The prompt sent: the argument, then the piped text, then the files, separated by blank lines.
std::string composePrompt(const std::string& argument, const std::string& piped,
                          const std::string& files);

}  // namespace parley::cli

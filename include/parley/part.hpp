// Message parts: text, images, audio and files in a user message (docs/parts.md).
//
// A Part is a plain value holding its bytes (or, for an image, a URL). A message made of parts
// keeps them in its Chat Completions form, the array in Message::extra["content"] that parley has
// always kept verbatim, so histories stored before parts existed load the same and a Chat
// Completions request carries them unchanged; partsOf() reads them back as Parts, and each
// protocol's request writer translates them (docs/protocols.md, "Message parts").
//
// Thread-safety: values and pure functions; no shared state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace parley {

struct Message;

enum class PartKind { Text, Image, Audio, File };

// How closely a model looks at an image (OpenAI's `detail`; other protocols ignore it).
enum class ImageDetail { Auto, Low, High };

// The declared caps on what a message carries. Bytes above a cap are refused with a
// ValidationError naming the file (or part) and the cap, before anything is read or sent.
struct PartLimits {
  // One part's bytes: 20 MiB, OpenAI's per-image limit (Anthropic takes 5 MiB per image and
  // 32 MiB per request; a bigger part fails at the server with its own message).
  std::size_t maxPartBytes = 20u << 20;
  // All the parts of one message together: 50 MiB, OpenAI's per-request total for images.
  std::size_t maxMessageBytes = 50u << 20;
  // Parts in one message.
  std::size_t maxParts = 100;
};

struct Part {
  PartKind kind = PartKind::Text;
  std::string content;   // Text: the text
  std::string url;       // Image given by URL (then `bytes` is empty)
  std::string bytes;     // Image, Audio, File: the raw bytes
  std::string mimeType;  // Image, Audio, File: e.g. "image/png", "audio/wav", "application/pdf"
  std::string filename;  // File (and whatever was read from a path): the name shown to the model
  std::optional<ImageDetail> detail;  // Image

  bool operator==(const Part&) const = default;

  static Part text(std::string text);
  static Part imageUrl(std::string url, std::optional<ImageDetail> detail = std::nullopt);
  // `mimeType` "" means sniffed from the bytes; bytes that are not a png, jpeg, gif or webp image
  // throw ValidationError.
  static Part imageBytes(std::string bytes, std::string mimeType = "",
                         std::optional<ImageDetail> detail = std::nullopt,
                         const PartLimits& limits = {});
  static Part imageFile(const std::filesystem::path& path,
                        std::optional<ImageDetail> detail = std::nullopt,
                        const PartLimits& limits = {});
  // Audio as wav or mp3 (the formats OpenAI's input_audio takes); "" sniffs.
  static Part audioBytes(std::string bytes, std::string mimeType = "",
                         const PartLimits& limits = {});
  static Part audioFile(const std::filesystem::path& path, const PartLimits& limits = {});
  // Any document (a pdf, a text file, ...); "" sniffs (application/octet-stream when unknown).
  static Part fileBytes(std::string bytes, std::string filename, std::string mimeType = "",
                        const PartLimits& limits = {});
  static Part file(const std::filesystem::path& path, const PartLimits& limits = {});
  // The part a file stands for, chosen by its sniffed type: an image, audio (wav, mp3) or a file.
  static Part attachment(std::string bytes, std::string filename, const PartLimits& limits = {});
  static Part attachmentFile(const std::filesystem::path& path, const PartLimits& limits = {});
};

// The MIME type the first bytes announce (png, jpeg, gif, webp, bmp, pdf, wav, mp3, ogg, flac,
// zip), "text/plain" for valid UTF-8 without control bytes, else "" (unknown).
std::string sniffMimeType(std::string_view bytes);

struct ImageSize {
  int width = 0;
  int height = 0;
  bool operator==(const ImageSize&) const = default;
};

// The size a png, jpeg, gif or webp header declares (nothing is decoded), or nullopt.
std::optional<ImageSize> imageSize(std::string_view bytes);

// Which provider's rule prices an image in prompt tokens.
enum class ImageTokenRule {
  // OpenAI's tiles: detail low is 85; otherwise fit in 2048x2048, scale the shortest side
  // down to 768, then 170 per 512-pixel tile + 85.
  OpenAiTiles,
  // Anthropic's pixels: scaled to a long edge of at most 1568 and at most ~1.15 megapixels,
  // then width * height / 750.
  AnthropicPixels,
};

int64_t imageTokens(ImageSize size, ImageDetail detail, ImageTokenRule rule);

// Reads a file, refusing one over `maxBytes` (before reading it: "is N bytes, over the cap of
// 1 MiB") with a ValidationError whose field is the path. "-" reads standard input (up to the
// cap, field "stdin").
std::string readPartFile(const std::filesystem::path& path, std::size_t maxBytes);

// A message's parts: its content array read back (a message without one is a single text part,
// or none when its content is empty). Throws ValidationError naming the part for a part type
// parley does not know.
std::vector<Part> partsOf(const Message& message);

// Whether the message keeps its content as parts (Message::extra["content"]).
bool hasParts(const Message& message);

// The Chat Completions content array for `parts`: the form Message keeps.
// Throws ValidationError when the parts exceed `limits`.
nlohmann::json partsContentJson(const std::vector<Part>& parts, const PartLimits& limits = {});

// "data:<mimeType>;base64,<bytes>" for a part that holds bytes.
std::string dataUri(const Part& part);

// Base64 (RFC 4648, padded), used for data URIs and the stores' blobs.
std::string base64Encode(std::string_view bytes);
// nullopt when `text` is not base64.
std::optional<std::string> base64Decode(std::string_view text);

}  // namespace parley

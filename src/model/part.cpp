#include "parley/part.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>

#include "model/base64url.hpp"
#include "parley/errors.hpp"
#include "parley/message.hpp"

namespace parley {

namespace {

constexpr std::string_view kDataPrefix = "data:";
constexpr std::string_view kBase64Marker = ";base64,";

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

uint32_t be16(std::string_view b, size_t at) {
  return (static_cast<uint8_t>(b[at]) << 8) | static_cast<uint8_t>(b[at + 1]);
}
uint32_t le16(std::string_view b, size_t at) {
  return static_cast<uint8_t>(b[at]) | (static_cast<uint8_t>(b[at + 1]) << 8);
}
uint32_t le24(std::string_view b, size_t at) {
  return le16(b, at) | (static_cast<uint8_t>(b[at + 2]) << 16);
}
uint32_t be32(std::string_view b, size_t at) {
  return (be16(b, at) << 16) | be16(b, at + 2);
}

bool validUtf8Text(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f') return false;
      if (c == 0x7f) return false;
      ++i;
      continue;
    }
    const int more = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (more < 0 || i + static_cast<size_t>(more) >= s.size()) return false;
    for (int k = 1; k <= more; ++k) {
      if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += more + 1;
  }
  return true;
}

// "20 MiB", "1.5 MiB", "300 KiB", "999 bytes".
std::string humanBytes(std::size_t n) {
  char text[32];
  if (n >= (1u << 20) && n % (1u << 20) == 0) {
    std::snprintf(text, sizeof text, "%zu MiB", n >> 20);
  } else if (n >= (1u << 20)) {
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(n) / (1u << 20));
  } else if (n >= 1024 && n % 1024 == 0) {
    std::snprintf(text, sizeof text, "%zu KiB", n >> 10);
  } else {
    std::snprintf(text, sizeof text, "%zu bytes", n);
  }
  return text;
}

void checkPartSize(std::size_t size, const std::string& what, const PartLimits& limits) {
  if (size > limits.maxPartBytes) {
    throw ValidationError(what, "is " + std::to_string(size) + " bytes, over the cap of " +
                                    humanBytes(limits.maxPartBytes) +
                                    " per part (PartLimits::maxPartBytes)");
  }
}

bool isImageType(std::string_view mime) {
  return mime == "image/png" || mime == "image/jpeg" || mime == "image/gif" || mime == "image/webp";
}

bool isAudioType(std::string_view mime) {
  return mime == "audio/wav" || mime == "audio/mpeg";
}

// "data:image/png;base64,XXXX" -> (mime, bytes); nullopt for another URL.
std::optional<std::pair<std::string, std::string>> parseDataUri(std::string_view url,
                                                                const std::string& field) {
  if (!startsWith(url, kDataPrefix)) return std::nullopt;
  const size_t marker = url.find(kBase64Marker);
  if (marker == std::string_view::npos) {
    throw ValidationError(field, "is a data URI that is not base64");
  }
  auto bytes = base64Decode(url.substr(marker + kBase64Marker.size()));
  if (!bytes) throw ValidationError(field, "is a data URI whose base64 is malformed");
  return std::make_pair(std::string(url.substr(kDataPrefix.size(), marker - kDataPrefix.size())),
                        std::move(*bytes));
}

std::string detailName(ImageDetail detail) {
  switch (detail) {
    case ImageDetail::Low:
      return "low";
    case ImageDetail::High:
      return "high";
    case ImageDetail::Auto:
      break;
  }
  return "auto";
}

std::optional<ImageDetail> parseDetail(const nlohmann::json& value, const std::string& field) {
  if (value.is_null()) return std::nullopt;
  if (value == "low") return ImageDetail::Low;
  if (value == "high") return ImageDetail::High;
  if (value == "auto") return ImageDetail::Auto;
  throw ValidationError(field, "must be \"low\", \"high\" or \"auto\"");
}

const std::string& stringField(const nlohmann::json& object, const char* key,
                               const std::string& field) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    throw ValidationError(field + "." + key, "is required and must be a string");
  }
  return it->get_ref<const std::string&>();
}

std::string fileNameOf(const std::filesystem::path& path) {
  return path == "-" ? std::string("stdin") : path.filename().string();
}

// The part `make` builds from a file's bytes, named after the file; its errors name the path.
template <class Make>
Part fromFile(const std::filesystem::path& path, const PartLimits& limits, Make&& make) {
  std::string bytes = readPartFile(path, limits.maxPartBytes);
  try {
    Part p = make(std::move(bytes));
    p.filename = fileNameOf(path);
    return p;
  } catch (const ValidationError& e) {
    throw ValidationError(path.string(), e.reason());
  }
}

}  // namespace

std::string dataUri(const Part& part) {
  return "data:" + part.mimeType + ";base64," + base64Encode(part.bytes);
}

// --- base64 ----------------------------------------------------------------------------------

std::string base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

std::optional<std::string> base64Decode(std::string_view text) {
  static constexpr auto kValue = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i)
      t[static_cast<uint8_t>(digits[i])] = static_cast<int8_t>(i);
    return t;
  }();
  while (!text.empty() && text.back() == '=')
    text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    // NOLINTNEXTLINE(bugprone-signed-char-misuse): the table holds -1 or 0-63
    const int v = kValue[static_cast<uint8_t>(c)];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

namespace detail {

std::string base64UrlEncode(std::string_view bytes) {
  std::string text = base64Encode(bytes);
  for (char& c : text) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  while (!text.empty() && text.back() == '=')
    text.pop_back();
  return text;
}

std::optional<std::string> base64UrlDecode(std::string_view text) {
  std::string standard(text);
  for (char& c : standard) {
    if (c == '+' || c == '/' || c == '=') return std::nullopt;  // not of the url alphabet
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  return base64Decode(standard);
}

}  // namespace detail

// --- sniffing and image headers ----------------------------------------------------------------

std::string sniffMimeType(std::string_view b) {
  if (startsWith(b, "\x89PNG\r\n\x1a\n")) return "image/png";
  if (startsWith(b, "\xFF\xD8\xFF")) return "image/jpeg";
  if (startsWith(b, "GIF87a") || startsWith(b, "GIF89a")) return "image/gif";
  if (b.size() >= 12 && startsWith(b, "RIFF")) {
    if (b.substr(8, 4) == "WEBP") return "image/webp";
    if (b.substr(8, 4) == "WAVE") return "audio/wav";
  }
  if (startsWith(b, "BM") && b.size() >= 26) return "image/bmp";
  if (startsWith(b, "%PDF-")) return "application/pdf";
  if (startsWith(b, "ID3")) return "audio/mpeg";
  if (b.size() >= 2 && static_cast<uint8_t>(b[0]) == 0xFF &&
      (static_cast<uint8_t>(b[1]) & 0xE0) == 0xE0 && (static_cast<uint8_t>(b[1]) & 0x06) != 0) {
    return "audio/mpeg";  // an MPEG audio frame header (layer bits not 00)
  }
  if (startsWith(b, "OggS")) return "audio/ogg";
  if (startsWith(b, "fLaC")) return "audio/flac";
  if (startsWith(b, "PK\x03\x04")) return "application/zip";
  if (!b.empty() && validUtf8Text(b)) return "text/plain";
  return "";
}

std::optional<ImageSize> imageSize(std::string_view b) {
  const std::string mime = sniffMimeType(b);
  auto sized = [](uint32_t w, uint32_t h) -> std::optional<ImageSize> {
    if (w == 0 || h == 0 || w > 1u << 20 || h > 1u << 20) return std::nullopt;
    return ImageSize{static_cast<int>(w), static_cast<int>(h)};
  };
  if (mime == "image/png") {
    if (b.size() < 24 || b.substr(12, 4) != "IHDR") return std::nullopt;
    return sized(be32(b, 16), be32(b, 20));
  }
  if (mime == "image/gif") {
    if (b.size() < 10) return std::nullopt;
    return sized(le16(b, 6), le16(b, 8));
  }
  if (mime == "image/webp") {
    if (b.size() < 30) return std::nullopt;
    const std::string_view chunk = b.substr(12, 4);
    if (chunk == "VP8X") return sized(le24(b, 24) + 1, le24(b, 27) + 1);
    if (chunk == "VP8L") {
      if (static_cast<uint8_t>(b[20]) != 0x2f) return std::nullopt;
      const uint32_t bits = static_cast<uint8_t>(b[21]) | (static_cast<uint8_t>(b[22]) << 8) |
                            (static_cast<uint8_t>(b[23]) << 16) |
                            (static_cast<uint32_t>(static_cast<uint8_t>(b[24])) << 24);
      return sized((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1);
    }
    if (chunk == "VP8 ") {
      // The key frame's start code 9d 01 2a, then 14-bit width and height.
      if (b.substr(23, 3) != "\x9d\x01\x2a") return std::nullopt;
      return sized(le16(b, 26) & 0x3FFF, le16(b, 28) & 0x3FFF);
    }
    return std::nullopt;
  }
  if (mime == "image/jpeg") {
    // Walk the markers to the first start-of-frame (SOF0..SOF15 but DHT, JPG and DAC).
    size_t at = 2;
    while (at + 9 < b.size()) {
      if (static_cast<uint8_t>(b[at]) != 0xFF) return std::nullopt;
      const auto marker = static_cast<uint8_t>(b[at + 1]);
      if (marker == 0xFF) {
        ++at;  // fill byte
        continue;
      }
      if (marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {
        at += 2;
        continue;
      }
      const uint32_t length = be16(b, at + 2);
      if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
        return sized(be16(b, at + 7), be16(b, at + 5));
      }
      if (marker == 0xD9 || marker == 0xDA || length < 2) return std::nullopt;
      at += 2 + length;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

int64_t imageTokens(ImageSize size, ImageDetail detail, ImageTokenRule rule) {
  double w = size.width, h = size.height;
  if (w <= 0 || h <= 0) return 0;
  if (rule == ImageTokenRule::AnthropicPixels) {
    constexpr double kMaxEdge = 1568, kMaxPixels = 1600.0 * 750;
    double scale = std::min(1.0, kMaxEdge / std::max(w, h));
    scale = std::min(scale, std::sqrt(kMaxPixels / (w * h)));
    w = std::floor(w * scale);
    h = std::floor(h * scale);
    return static_cast<int64_t>(std::ceil(w * h / 750));
  }
  constexpr int64_t kBase = 85, kPerTile = 170;
  if (detail == ImageDetail::Low) return kBase;
  if (w > 2048 || h > 2048) {
    const double scale = 2048 / std::max(w, h);
    w = std::floor(w * scale);
    h = std::floor(h * scale);
  }
  if (std::min(w, h) > 768) {
    const double scale = 768 / std::min(w, h);
    w = std::floor(w * scale);
    h = std::floor(h * scale);
  }
  const auto tiles = static_cast<int64_t>(std::ceil(w / 512) * std::ceil(h / 512));
  return kBase + kPerTile * tiles;
}

// --- reading files -----------------------------------------------------------------------------

std::string readPartFile(const std::filesystem::path& path, std::size_t maxBytes) {
  const std::string name = path.string();
  std::string bytes;
  auto readCapped = [&](std::istream& in) {
    // Read one byte past the cap, so that a longer input is seen without reading all of it.
    std::vector<char> buffer(std::size_t{64} * 1024);
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      bytes.append(buffer.data(), static_cast<size_t>(in.gcount()));
      if (bytes.size() > maxBytes) {
        throw ValidationError(name == "-" ? "stdin" : name,
                              "is more than the cap of " + humanBytes(maxBytes));
      }
    }
  };
  if (name == "-") {
    readCapped(std::cin);
    return bytes;
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw ValidationError(name, "is not a readable file");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > maxBytes) {
    throw ValidationError(
        name, "is " + std::to_string(size) + " bytes, over the cap of " + humanBytes(maxBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ValidationError(name, "cannot be opened");
  readCapped(in);
  return bytes;
}

// --- Part --------------------------------------------------------------------------------------

Part Part::text(std::string text) {
  Part p;
  p.kind = PartKind::Text;
  p.content = std::move(text);
  return p;
}

Part Part::imageUrl(std::string url, std::optional<ImageDetail> detail) {
  if (url.empty()) throw ValidationError("part.image_url", "must not be empty");
  if (startsWith(url, kDataPrefix)) {
    auto data = parseDataUri(url, "part.image_url");
    return imageBytes(std::move(data->second), std::move(data->first), detail);
  }
  Part p;
  p.kind = PartKind::Image;
  p.url = std::move(url);
  p.detail = detail;
  return p;
}

Part Part::imageBytes(std::string bytes, std::string mimeType, std::optional<ImageDetail> detail,
                      const PartLimits& limits) {
  checkPartSize(bytes.size(), "part.image", limits);
  if (mimeType.empty()) mimeType = sniffMimeType(bytes);
  if (!isImageType(mimeType)) {
    throw ValidationError("part.image", "is not a png, jpeg, gif or webp image (" +
                                            (mimeType.empty() ? "unknown type" : mimeType) + ")");
  }
  Part p;
  p.kind = PartKind::Image;
  p.bytes = std::move(bytes);
  p.mimeType = std::move(mimeType);
  p.detail = detail;
  return p;
}

Part Part::imageFile(const std::filesystem::path& path, std::optional<ImageDetail> detail,
                     const PartLimits& limits) {
  return fromFile(path, limits, [&](std::string bytes) {
    return imageBytes(std::move(bytes), "", detail, limits);
  });
}

Part Part::audioBytes(std::string bytes, std::string mimeType, const PartLimits& limits) {
  checkPartSize(bytes.size(), "part.audio", limits);
  if (mimeType.empty()) mimeType = sniffMimeType(bytes);
  if (mimeType == "audio/mp3") mimeType = "audio/mpeg";
  if (mimeType == "audio/x-wav" || mimeType == "audio/wave") mimeType = "audio/wav";
  if (!isAudioType(mimeType)) {
    throw ValidationError("part.audio", "is not wav or mp3 audio (" +
                                            (mimeType.empty() ? "unknown type" : mimeType) + ")");
  }
  Part p;
  p.kind = PartKind::Audio;
  p.bytes = std::move(bytes);
  p.mimeType = std::move(mimeType);
  return p;
}

Part Part::audioFile(const std::filesystem::path& path, const PartLimits& limits) {
  return fromFile(path, limits,
                  [&](std::string bytes) { return audioBytes(std::move(bytes), "", limits); });
}

Part Part::fileBytes(std::string bytes, std::string filename, std::string mimeType,
                     const PartLimits& limits) {
  checkPartSize(bytes.size(), filename.empty() ? "part.file" : filename, limits);
  if (filename.empty()) throw ValidationError("part.file.filename", "must not be empty");
  if (mimeType.empty()) mimeType = sniffMimeType(bytes);
  if (mimeType.empty()) mimeType = "application/octet-stream";
  Part p;
  p.kind = PartKind::File;
  p.bytes = std::move(bytes);
  p.mimeType = std::move(mimeType);
  p.filename = std::move(filename);
  return p;
}

Part Part::file(const std::filesystem::path& path, const PartLimits& limits) {
  return fromFile(path, limits, [&](std::string bytes) {
    return fileBytes(std::move(bytes), fileNameOf(path), "", limits);
  });
}

Part Part::attachment(std::string bytes, std::string filename, const PartLimits& limits) {
  checkPartSize(bytes.size(), filename.empty() ? "part" : filename, limits);
  const std::string mime = sniffMimeType(bytes);
  Part p = isImageType(mime)   ? imageBytes(std::move(bytes), mime, std::nullopt, limits)
           : isAudioType(mime) ? audioBytes(std::move(bytes), mime, limits)
                               : fileBytes(std::move(bytes), filename, mime, limits);
  p.filename = std::move(filename);
  return p;
}

Part Part::attachmentFile(const std::filesystem::path& path, const PartLimits& limits) {
  return fromFile(path, limits, [&](std::string bytes) {
    return attachment(std::move(bytes), fileNameOf(path), limits);
  });
}

// --- the Chat Completions form -----------------------------------------------------------------

nlohmann::json partsContentJson(const std::vector<Part>& parts, const PartLimits& limits) {
  if (parts.empty()) throw ValidationError("message.content", "has no parts");
  if (parts.size() > limits.maxParts) {
    throw ValidationError("message.content",
                          "has " + std::to_string(parts.size()) + " parts, over the cap of " +
                              std::to_string(limits.maxParts) + " (PartLimits::maxParts)");
  }
  std::size_t total = 0;
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& part = parts[i];
    const std::string field = "message.content[" + std::to_string(i) + "]";
    const std::string what = part.filename.empty() ? field : part.filename;
    checkPartSize(part.bytes.size(), what, limits);
    total += part.bytes.size();
    if (total > limits.maxMessageBytes) {
      throw ValidationError(what, "brings the message's parts to " + humanBytes(total) +
                                      ", over the cap of " + humanBytes(limits.maxMessageBytes) +
                                      " per message (PartLimits::maxMessageBytes)");
    }
    nlohmann::json item;
    switch (part.kind) {
      case PartKind::Text:
        item = {{"type", "text"}, {"text", part.content}};
        break;
      case PartKind::Image: {
        if (part.url.empty() && part.bytes.empty()) {
          throw ValidationError(field, "is an image with neither a URL nor bytes");
        }
        if (part.url.empty() && !isImageType(part.mimeType)) {
          throw ValidationError(field,
                                "is not a png, jpeg, gif or webp image (" + part.mimeType + ")");
        }
        nlohmann::json image = {{"url", part.url.empty() ? dataUri(part) : part.url}};
        if (part.detail) image["detail"] = detailName(*part.detail);
        item = {{"type", "image_url"}, {"image_url", std::move(image)}};
        break;
      }
      case PartKind::Audio:
        if (!isAudioType(part.mimeType)) {
          throw ValidationError(field, "is not wav or mp3 audio (" + part.mimeType + ")");
        }
        item = {{"type", "input_audio"},
                {"input_audio",
                 {{"data", base64Encode(part.bytes)},
                  {"format", part.mimeType == "audio/wav" ? "wav" : "mp3"}}}};
        break;
      case PartKind::File:
        if (part.filename.empty()) {
          throw ValidationError(field + ".filename", "must not be empty");
        }
        item = {{"type", "file"},
                {"file", {{"filename", part.filename}, {"file_data", dataUri(part)}}}};
        break;
    }
    out.push_back(std::move(item));
  }
  return out;
}

bool hasParts(const Message& message) {
  auto it = message.extra.find("content");
  return it != message.extra.end() && it->is_array();
}

std::vector<Part> partsOf(const Message& message) {
  std::vector<Part> parts;
  if (!hasParts(message)) {
    if (!message.content.empty()) parts.push_back(Part::text(message.content));
    return parts;
  }
  const nlohmann::json& array = message.extra["content"];
  parts.reserve(array.size());
  // Read back without the caps: the parts were capped when they were made, and a stored history
  // must load whatever a server took.
  PartLimits unlimited;
  unlimited.maxPartBytes = unlimited.maxMessageBytes = static_cast<std::size_t>(-1);
  for (size_t i = 0; i < array.size(); ++i) {
    const nlohmann::json& item = array[i];
    const std::string field = "message.content[" + std::to_string(i) + "]";
    if (!item.is_object()) throw ValidationError(field, "must be an object");
    const std::string& type = stringField(item, "type", field);
    if (type == "text") {
      parts.push_back(Part::text(stringField(item, "text", field)));
    } else if (type == "image_url") {
      auto image = item.find("image_url");
      if (image == item.end()) throw ValidationError(field + ".image_url", "is required");
      // OpenAI's older form: "image_url": "https://..."
      const bool bare = image->is_string();
      const std::string& url =
          bare ? image->get_ref<const std::string&>() : stringField(*image, "url", field);
      const auto detail =
          bare ? std::nullopt : parseDetail(image->value("detail", nlohmann::json()), field);
      if (auto data = parseDataUri(url, field + ".image_url.url")) {
        Part p;
        p.kind = PartKind::Image;
        p.mimeType = std::move(data->first);
        p.bytes = std::move(data->second);
        p.detail = detail;
        parts.push_back(std::move(p));
      } else {
        parts.push_back(Part::imageUrl(url, detail));
      }
    } else if (type == "input_audio") {
      auto audio = item.find("input_audio");
      if (audio == item.end() || !audio->is_object()) {
        throw ValidationError(field + ".input_audio", "is required and must be an object");
      }
      auto bytes = base64Decode(stringField(*audio, "data", field + ".input_audio"));
      if (!bytes) throw ValidationError(field + ".input_audio.data", "is not base64");
      const std::string& format = stringField(*audio, "format", field + ".input_audio");
      Part p;
      p.kind = PartKind::Audio;
      p.bytes = std::move(*bytes);
      p.mimeType = format == "wav"   ? "audio/wav"
                   : format == "mp3" ? "audio/mpeg"
                                     : "audio/" + format;
      parts.push_back(std::move(p));
    } else if (type == "file") {
      auto file = item.find("file");
      if (file == item.end() || !file->is_object()) {
        throw ValidationError(field + ".file", "is required and must be an object");
      }
      auto data =
          parseDataUri(stringField(*file, "file_data", field + ".file"), field + ".file.file_data");
      if (!data) throw ValidationError(field + ".file.file_data", "must be a base64 data URI");
      Part p;
      p.kind = PartKind::File;
      p.mimeType = std::move(data->first);
      p.bytes = std::move(data->second);
      p.filename = file->value("filename", std::string());
      parts.push_back(std::move(p));
    } else {
      throw ValidationError(field + ".type", "is \"" + type +
                                                 "\", a part type parley does not know (text, "
                                                 "image_url, input_audio, file)");
    }
  }
  return parts;
}

}  // namespace parley

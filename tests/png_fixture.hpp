// Small real images made by the tests (no files checked in): a PNG of any size, whose chunks carry
// correct CRCs and whose pixels are zlib-compressed black rows, and the headers of the other
// formats parley reads sizes from.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

namespace parley::test {

inline void putBe32(std::string& out, uint32_t v) {
  for (int shift : {24, 16, 8, 0})
    out.push_back(static_cast<char>((v >> shift) & 0xFF));
}

inline void pngChunk(std::string& out, const char* type, const std::string& data) {
  putBe32(out, static_cast<uint32_t>(data.size()));
  const std::string typed = std::string(type, 4) + data;
  out += typed;
  putBe32(out, static_cast<uint32_t>(
                   crc32(0, reinterpret_cast<const Bytef*>(typed.data()), typed.size())));
}

// A valid width x height grey PNG.
inline std::string makePng(uint32_t width, uint32_t height) {
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string header;
  putBe32(header, width);
  putBe32(header, height);
  header += std::string("\x08\x00\x00\x00\x00", 5);  // 8-bit grey, deflate, no filter, no interlace
  pngChunk(png, "IHDR", header);
  const std::string raw(static_cast<size_t>(height) * (width + 1), '\0');
  uLongf size = compressBound(raw.size());
  std::vector<Bytef> packed(size);
  compress(packed.data(), &size, reinterpret_cast<const Bytef*>(raw.data()), raw.size());
  pngChunk(png, "IDAT", std::string(reinterpret_cast<const char*>(packed.data()), size));
  pngChunk(png, "IEND", "");
  return png;
}

}  // namespace parley::test

// The tiktoken-compatible byte-pair encoder: UTF-8 handling, the rank table, the piece cache,
// the zeroed tables and the per-thread parts. Over 600 lines because these parts share one hot
// loop's data layout and are tuned together (docs/architecture.md, "Performance"); apart they
// would need their internals in a header.
#include "parley/bpe.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <new>
#include <queue>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "model/sha256.hpp"
#include "parley/errors.hpp"
#include "tokens/bpe_split.hpp"

namespace parley {

namespace {

// Special tokens and rank counts as npm tiktoken 1.0.22 defines them (encoders/*.json); the
// parity test checks them against the package.
const std::vector<EncodingSpec>& allSpecs() {
  static const std::vector<EncodingSpec> kSpecs = {
      {"cl100k_base",
       SplitPattern::Cl100k,
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}},
       100256,
       "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"},
      {"o200k_base",
       SplitPattern::O200k,
       R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}},
       199998,
       "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"},
  };
  return kSpecs;
}

// ---- UTF-8 ----------------------------------------------------------------------------------

// Length of the valid UTF-8 sequence at s[i], or 0 if the bytes there are ill-formed.
// With `prefix`, also reports how many bytes form a maximal ill-formed prefix (>= 1).
size_t utf8SequenceLength(const uint8_t* s, size_t n, size_t i, size_t* prefix) {
  const uint8_t b = s[i];
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *prefix = 1;
    return 0;
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= n) break;
    const uint8_t c = s[i + k];
    const uint8_t l = k == 1 ? lo : 0x80;
    const uint8_t h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) break;
  }
  if (k > need) return need + 1;
  *prefix = k;
  return 0;
}

bool isValidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if (!(w & 0x8080808080808080ull)) {
        i += 8;
        continue;
      }
    }
    size_t prefix = 0;
    size_t len = utf8SequenceLength(s, n, i, &prefix);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// Each maximal ill-formed subsequence becomes U+FFFD, as the WHATWG decoder does.
std::string replaceInvalidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  std::string out;
  out.reserve(n + 16);
  size_t i = 0;
  while (i < n) {
    size_t prefix = 0;
    size_t len = utf8SequenceLength(s, n, i, &prefix);
    if (len) {
      out.append(text.data() + i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += prefix;
    }
  }
  return out;
}

// ---- rank table -----------------------------------------------------------------------------

inline uint64_t load8(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline uint64_t mix(uint64_t h) {
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

// The first min(len, 8) bytes, zero-padded. `avail` bytes are readable from p.
inline uint64_t loadHead(const uint8_t* p, size_t len, size_t avail) {
  if (len >= 8) return load8(p);
  if (avail >= 8) return load8(p) & ((uint64_t{1} << (len * 8)) - 1);
  uint64_t v = 0;
  for (size_t i = 0; i < len; ++i)
    v |= uint64_t{p[i]} << (8 * i);
  return v;
}

inline uint64_t hashBytes(const uint8_t* p, size_t len, uint64_t head) {
  uint64_t h = (head ^ (len * 0x9E3779B97F4A7C15ull)) * 0xbf58476d1ce4e5b9ull;
  if (len > 8) {
    for (size_t i = 8; i + 8 < len; i += 8)
      h = (h ^ load8(p + i)) * 0x94d049bb133111ebull;
    h = (h ^ load8(p + len - 8)) * 0x94d049bb133111ebull;  // overlaps; stays in bounds
  }
  return mix(h);
}

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();

uint32_t nextGeneration() {
  static std::atomic<uint32_t> counter{0};
  return ++counter;
}

// The ids of recently seen pieces, per thread (so no locking), direct-mapped by hash. Entries
// carry the generation of the encoding that wrote them: encodings never share entries, and a
// new encoding at a dead one's address does not see its entries.
struct PieceCache {
  static constexpr size_t kEntries = 16384;
  static constexpr size_t kMaxBytes = 22;
  static constexpr size_t kMaxIds = 7;
  struct Entry {
    uint64_t hash = 0;
    uint32_t owner = 0;  // 0: empty
    uint8_t len = 0;
    uint8_t count = 0;
    char bytes[kMaxBytes];
    uint32_t ids[kMaxIds];

    void store(uint32_t gen, uint64_t h, const uint8_t* p, size_t n, const uint32_t* tokens,
               size_t k) {
      owner = gen;
      hash = h;
      len = static_cast<uint8_t>(n);
      count = static_cast<uint8_t>(k);
      std::memset(bytes, 0, kMaxBytes);  // so that the first 8 bytes compare as one word
      std::memcpy(bytes, p, n);
      std::memcpy(ids, tokens, k * sizeof(uint32_t));
    }
  };
  // calloc, not a vector: the allocator maps zero pages, so only the entries used become
  // memory (a process that counts one prompt does not pay for the whole megabyte).
  struct Free {
    void operator()(Entry* p) const { std::free(p); }
  };
  std::unique_ptr<Entry[], Free> entries{static_cast<Entry*>(std::calloc(kEntries, sizeof(Entry)))};

  Entry& slot(uint64_t hash) {
    if (!entries) throw std::bad_alloc();
    return entries[(hash >> 20) & (kEntries - 1)];
  }

  // Longer pieces (rules of dashes, long identifiers) are rarer but cost a full merge each:
  // a bounded map, emptied when full or when another encoding uses this thread.
  struct TransparentHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static constexpr size_t kMaxLongEntries = 4096;
  uint32_t longOwner = 0;
  std::unordered_map<std::string, std::vector<uint32_t>, TransparentHash, std::equal_to<>>
      longPieces;

  std::unordered_map<std::string, std::vector<uint32_t>, TransparentHash, std::equal_to<>>& longFor(
      uint32_t gen) {
    if (longOwner != gen || longPieces.size() >= kMaxLongEntries) {
      longPieces.clear();
      longOwner = gen;
    }
    return longPieces;
  }
};

PieceCache& pieceCache() {
  thread_local PieceCache cache;
  return cache;
}

// ---- memory for the tables ---------------------------------------------------------------

// A zeroed array for the large tables (o200k's hash table alone is 8 MB), mapped so that it is
// filled in one system call, in 2 MB pages where the kernel has them: touched page by page, it
// cost thousands of page faults, the better part of loading a vocabulary.
template <class T>
class ZeroedArray {
 public:
  ZeroedArray() = default;
  explicit ZeroedArray(size_t count) : count_(count) {
    if (count == 0) return;
    bytes_ = (count * sizeof(T) + kHugePage - 1) / kHugePage * kHugePage;
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    ::madvise(p, bytes_, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
    ::madvise(p, bytes_, MADV_POPULATE_WRITE);  // a hint: without it, pages come on first touch
#endif
    data_ = static_cast<T*>(p);
  }
  ~ZeroedArray() {
    if (data_) ::munmap(data_, bytes_);
  }
  ZeroedArray(ZeroedArray&& other) noexcept {
    *this = std::move(other);
  }
  ZeroedArray& operator=(ZeroedArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  T* data() noexcept {
    return data_;
  }
  const T* data() const noexcept {
    return data_;
  }
  size_t size() const noexcept {
    return count_;
  }
  T& operator[](size_t i) noexcept {
    return data_[i];
  }
  const T& operator[](size_t i) const noexcept {
    return data_[i];
  }

 private:
  static constexpr size_t kHugePage = size_t{2} << 20;
  T* data_ = nullptr;
  size_t count_ = 0;
  size_t bytes_ = 0;
};

// ---- the rank table ---------------------------------------------------------------------

// One slot of the open-addressing table from token bytes to rank; all zero: empty.
struct RankSlot {
  uint64_t head;  // the first min(len, 8) bytes, zero-padded
  uint32_t len;   // 0: empty
  uint32_t rank;
};
static_assert(sizeof(RankSlot) == 16);

constexpr unsigned kFilterBits = 22;
constexpr uint32_t kRankTableVersion = 1;
constexpr char kRankTableMagic[8] = {'p', 'a', 'r', 'l', 'e', 'y', 'R', 'T'};

// Every table of an encoding in one image, so that it can be a file mapped read-only and shared
// by every process that counts (docs/architecture.md, "Tokens"): built once from the rank file,
// then mapped in microseconds where parsing took tens of milliseconds, and only the pages a
// count touches are read. The header, then each table at an offset it names.
struct RankTableHeader {
  char magic[8];
  uint32_t version;
  uint32_t byteOrder;  // kByteOrder as written: a table of another machine's byte order fails
  char sha256[64];     // of the rank file it was built from (the spec's: only those are kept)
  uint64_t sourceBytes;
  uint64_t rankCount, slotCount, blobBytes;
  uint64_t slotsAt, filterAt, byteRankAt, pairRanksAt, offsetsAt, blobAt, totalBytes;
  uint64_t check;  // hashBytes() of the header before this field

  static constexpr uint32_t kByteOrder = 0x01020304;

  uint64_t checksum() const {
    const auto* p = reinterpret_cast<const uint8_t*>(this);
    const size_t len = offsetof(RankTableHeader, check);
    return hashBytes(p, len, load8(p));
  }
};

RankTableHeader rankTableLayout(const EncodingSpec& spec, size_t blobBytes, size_t sourceBytes) {
  RankTableHeader h{};
  std::memcpy(h.magic, kRankTableMagic, sizeof h.magic);
  h.version = kRankTableVersion;
  h.byteOrder = RankTableHeader::kByteOrder;
  std::memcpy(h.sha256, spec.sha256.data(), std::min<size_t>(spec.sha256.size(), 64));
  h.sourceBytes = sourceBytes;
  h.rankCount = spec.rankCount;
  h.slotCount = 1;
  while (h.slotCount < h.rankCount * 2)
    h.slotCount <<= 1;
  h.blobBytes = blobBytes;
  auto place = [at = uint64_t{4096}](uint64_t bytes) mutable {
    const uint64_t here = at;
    at = (at + bytes + 4095) / 4096 * 4096;
    return here;
  };
  h.slotsAt = place(h.slotCount * sizeof(RankSlot));
  h.filterAt = place((uint64_t{1} << kFilterBits) / 8);
  h.byteRankAt = place(256 * sizeof(uint32_t));
  h.pairRanksAt = place(65536 * sizeof(uint32_t));
  h.offsetsAt = place((h.rankCount + 1) * sizeof(uint32_t));
  h.blobAt = place(blobBytes + 8);  // 8 zero bytes after the last token: see find()
  h.totalBytes = place(0);
  h.check = h.checksum();
  return h;
}

// The image of `spec`'s tables from the rank file's tokens (blob, offsets: rank -> start, and
// the end). Throws Error for a duplicate token or a missing single byte.
ZeroedArray<char> buildRankTable(const EncodingSpec& spec, std::string_view tokens,
                                 const std::vector<uint32_t>& offsets, size_t sourceBytes) {
  const RankTableHeader h = rankTableLayout(spec, tokens.size(), sourceBytes);
  ZeroedArray<char> image(h.totalBytes);
  char* base = image.data();
  std::memcpy(base, &h, sizeof h);
  auto* slots = reinterpret_cast<RankSlot*>(base + h.slotsAt);
  auto* filter = reinterpret_cast<uint64_t*>(base + h.filterAt);
  auto* byteRank = reinterpret_cast<uint32_t*>(base + h.byteRankAt);
  auto* pairRanks = reinterpret_cast<uint32_t*>(base + h.pairRanksAt);
  std::memcpy(base + h.offsetsAt, offsets.data(), offsets.size() * sizeof(uint32_t));
  std::memcpy(base + h.blobAt, tokens.data(), tokens.size());
  const std::string_view blob(base + h.blobAt, tokens.size() + 8);
  std::fill_n(byteRank, 256, kNoRank);
  std::fill_n(pairRanks, 65536, kNoRank);
  const uint64_t mask = h.slotCount - 1;
  for (uint32_t r = 0; r < h.rankCount; ++r) {
    const std::string_view b = blob.substr(offsets[r], offsets[r + 1] - offsets[r]);
    const auto* p = reinterpret_cast<const uint8_t*>(b.data());
    // The blob may end right after this token; loadHead reads no further than it may.
    const uint64_t head = loadHead(p, b.size(), blob.size() - offsets[r]);
    const uint64_t hash = hashBytes(p, b.size(), head);
    uint64_t i = hash & mask;
    while (slots[i].len != 0) {
      const uint32_t other = slots[i].rank;
      if (slots[i].len == b.size() &&
          blob.substr(offsets[other], offsets[other + 1] - offsets[other]) == b) {
        throw Error(spec.name + ": duplicate token in the rank file at rank " + std::to_string(r));
      }
      i = (i + 1) & mask;
    }
    slots[i] = RankSlot{head, static_cast<uint32_t>(b.size()), r};
    const uint64_t bit = hash >> (64 - kFilterBits);
    filter[bit / 64] |= uint64_t{1} << (bit % 64);
    if (b.size() == 1) byteRank[static_cast<uint8_t>(b[0])] = r;
    if (b.size() == 2) pairRanks[static_cast<uint8_t>(b[0]) << 8 | static_cast<uint8_t>(b[1])] = r;
  }
  for (size_t byte = 0; byte < 256; ++byte) {
    if (byteRank[byte] == kNoRank)
      throw Error(spec.name + ": the rank file lacks a single-byte token");
  }
  return image;
}

// A file mapped read-only and shared (MAP_SHARED: the page cache's pages, one copy for every
// process); unmapped by the destructor.
class FileMapping {
 public:
  FileMapping() = default;
  FileMapping(void* data, size_t bytes) : data_(static_cast<char*>(data)), bytes_(bytes) {}
  FileMapping(FileMapping&& other) noexcept { *this = std::move(other); }
  FileMapping& operator=(FileMapping&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~FileMapping() {
    if (data_) ::munmap(data_, bytes_);
  }
  const char* data() const noexcept { return data_; }

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

// Where the rank tables are kept: PARLEY_CACHE_DIR when set (non-empty), else
// $XDG_CACHE_HOME/parley, else $HOME/.cache/parley; empty (no tables: every load parses the rank
// file) without any.
std::filesystem::path rankTableDir() {
  const auto set = [](const char* name) -> const char* {
    const char* value = std::getenv(name);
    return value && *value ? value : nullptr;
  };
  if (const char* dir = set("PARLEY_CACHE_DIR")) return dir;
  if (const char* dir = set("XDG_CACHE_HOME")) return std::filesystem::path(dir) / "parley";
  if (const char* dir = set("HOME")) return std::filesystem::path(dir) / ".cache" / "parley";
  return {};
}

// "<name>-<first 16 hex digits of the sha256>.v<version>.table".
std::string rankTableFileName(const EncodingSpec& spec) {
  return spec.name + "-" + spec.sha256.substr(0, 16) + ".v" + std::to_string(kRankTableVersion) +
         ".table";
}

// The table file of `spec` mapped, if it is one: its header (magic, version, byte order, its
// own checksum) names the spec's sha256 and a rank file of `sourceBytes`, and its size is the
// header's. Anything else (no file, another version, a torn or foreign file) is no table: the
// caller parses the rank file and writes the table again. The tables themselves are not hashed
// on load: that would read every page, the cost the file exists to avoid; they are written
// whole (a temporary file renamed) from a rank file whose hash was checked.
FileMapping mapRankTable(const std::filesystem::path& path, const EncodingSpec& spec,
                         size_t sourceBytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat info {};
  RankTableHeader h{};
  const bool readable = ::fstat(fd, &info) == 0 && info.st_size >= 4096 &&
                        ::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h);
  // The header this build would write for the same tokens: every field, the checksum and the
  // places of the tables included (so no offset points out of the file).
  const RankTableHeader expected = rankTableLayout(spec, h.blobBytes, sourceBytes);
  const bool valid = readable && h.blobBytes < (uint64_t{1} << 32) &&
                     std::memcmp(&h, &expected, sizeof h) == 0 &&
                     h.totalBytes == static_cast<uint64_t>(info.st_size);
  if (!valid) {
    ::close(fd);
    return {};
  }
  void* p = ::mmap(nullptr, h.totalBytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return {};
  return FileMapping(p, h.totalBytes);
}

// Best effort: a cache that cannot be written leaves the process as it was (it keeps its tables
// in memory and the next one parses the rank file again).
void writeRankTable(const std::filesystem::path& path, const ZeroedArray<char>& image) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return;
  const auto& h = *reinterpret_cast<const RankTableHeader*>(image.data());
  const std::filesystem::path temporary = path.string() + ".tmp-" + std::to_string(::getpid()) +
                                          "-" + std::to_string(reinterpret_cast<uintptr_t>(&image));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < h.totalBytes) {
    const ssize_t n = ::write(fd, image.data() + done, h.totalBytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool whole = done == h.totalBytes && ::close(fd) == 0;
  if (!whole || ::rename(temporary.c_str(), path.c_str()) != 0) ::unlink(temporary.c_str());
}

// ---- parts for several threads ----------------------------------------------------------

constexpr size_t kMinParallelBytes = size_t{1} << 20;
constexpr size_t kMinPartBytes = size_t{256} << 10;

bool isAsciiAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// The first position at or after `from` where the text may be cut so that both sides split
// into the same pieces as the whole does: right after a line break that an ASCII letter or
// digit follows. The pieces that hold a line break are whitespace, or punctuation followed by
// line breaks (and '/' in o200k); none takes in a letter or digit after the break, and the
// splitter only looks forward from a piece's start. Invalid UTF-8 cannot span the cut either:
// the byte after it is ASCII. npos when there is no such place.
size_t nextCut(std::string_view text, size_t from) {
  size_t i = std::max<size_t>(from, 1) - 1;  // where a line break may sit
  while (i + 1 < text.size()) {
    const void* found = std::memchr(text.data() + i, '\n', text.size() - 1 - i);
    if (!found) return std::string_view::npos;
    const size_t cut = static_cast<size_t>(static_cast<const char*>(found) - text.data()) + 1;
    if (isAsciiAlnum(text[cut])) return cut;
    i = cut;
  }
  return std::string_view::npos;
}

// `text` cut into at most `threads` parts of about equal size at nextCut() positions; one
// part when the text is short, special tokens are allowed, or there is nowhere to cut.
std::vector<std::string_view> partsFor(std::string_view text, const EncodeOptions& options) {
  unsigned threads = options.threads == 0 ? std::thread::hardware_concurrency() : options.threads;
  if (threads <= 1 || text.size() < kMinParallelBytes || options.allowAllSpecial ||
      !options.allowedSpecial.empty()) {
    return {text};
  }
  threads = static_cast<unsigned>(std::min<size_t>(threads, text.size() / kMinPartBytes));
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (unsigned k = 1; k < threads; ++k) {
    const size_t cut = nextCut(text, std::max(start + 1, text.size() / threads * k));
    if (cut == std::string_view::npos) break;
    parts.push_back(text.substr(start, cut - start));
    start = cut;
  }
  parts.push_back(text.substr(start));
  return parts;
}

// Runs work(i) for every part, part 0 on this thread and the others on threads of their own
// (a thread that cannot be started runs its part here instead), and rethrows the first error.
template <class Work>
void forEachPart(size_t parts, const Work& work) {
  std::vector<std::exception_ptr> errors(parts);
  auto guarded = [&](size_t i) {
    try {
      work(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  {
    std::vector<std::jthread> helpers;
    std::vector<size_t> here = {0};
    for (size_t i = 1; i < parts; ++i) {
      try {
        helpers.emplace_back(guarded, i);
      } catch (const std::system_error&) {
        here.push_back(i);
      }
    }
    for (size_t i : here)
      guarded(i);
  }  // joins the helpers
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace

// ---- the encoding ---------------------------------------------------------------------------

class Encoding::Impl {
 public:
  EncodingSpec spec;
  // The tables live in one image (RankTableHeader's layout): a read-only mapping of the rank
  // table file that processes share, or anonymous memory when there is no such file.
  FileMapping mapped;
  ZeroedArray<char> built;
  std::string_view blob;              // token bytes, in rank order, then 8 zero bytes
  const uint32_t* offsets = nullptr;  // rank -> start in blob; offsets[rankCount] = end
  size_t ranks = 0;
  const RankSlot* slots = nullptr;
  uint64_t slotMask = 0;
  // One bit per hash value (other bits of the hash than the slot index): most lookups while
  // merging ask for a pair that is no token, and this 512 KB filter, which stays in the CPU's
  // cache, answers most of them without touching the table (megabytes: a cache miss each).
  const uint64_t* filter = nullptr;
  static uint64_t filterBit(uint64_t hash) { return hash >> (64 - kFilterBits); }
  const uint32_t* byteRank = nullptr;      // [byte] -> rank of the single byte
  const uint32_t* pairRanks = nullptr;     // [b0 << 8 | b1] -> rank of the two bytes, or kNoRank
  uint32_t generation = nextGeneration();  // tells this encoding's cache entries apart

  size_t rankCount() const { return ranks; }

  std::string_view bytesOf(uint32_t rank) const {
    return blob.substr(offsets[rank], offsets[rank + 1] - offsets[rank]);
  }

  // Points the tables into an image whose header has been checked.
  void attach(const char* image) {
    const auto& h = *reinterpret_cast<const RankTableHeader*>(image);
    ranks = h.rankCount;
    offsets = reinterpret_cast<const uint32_t*>(image + h.offsetsAt);
    blob = std::string_view(image + h.blobAt, h.blobBytes + 8);
    slots = reinterpret_cast<const RankSlot*>(image + h.slotsAt);
    slotMask = h.slotCount - 1;
    filter = reinterpret_cast<const uint64_t*>(image + h.filterAt);
    byteRank = reinterpret_cast<const uint32_t*>(image + h.byteRankAt);
    pairRanks = reinterpret_cast<const uint32_t*>(image + h.pairRanksAt);
  }

  // The rank of bytes [p, p+len), or kNoRank. `avail` bytes are readable from p.
  uint32_t find(const uint8_t* p, size_t len, size_t avail) const {
    const uint64_t head = loadHead(p, len, avail);
    return findHashed(p, len, head, hashBytes(p, len, head));
  }

  uint32_t findHashed(const uint8_t* p, size_t len, uint64_t head, uint64_t hash) const {
    const uint64_t bit = filterBit(hash);
    if (!(filter[bit / 64] >> (bit % 64) & 1)) return kNoRank;
    uint64_t i = hash & slotMask;
    for (;;) {
      const RankSlot& slot = slots[i];
      if (slot.len == len && slot.head == head) {
        if (len <= 8 || std::memcmp(blob.data() + offsets[slot.rank] + 8, p + 8, len - 8) == 0) {
          return slot.rank;
        }
      } else if (slot.len == 0) {
        return kNoRank;
      }
      i = (i + 1) & slotMask;
    }
  }

  // A lookup of bytes [from, to) of p whose table slot is already on its way into the cache.
  struct Probe {
    const uint8_t* p;
    size_t len;
    uint64_t head;
    uint64_t hash;
    uint32_t rank(const Impl& impl) const { return impl.findHashed(p, len, head, hash); }
  };
  Probe probe(const uint8_t* p, size_t from, size_t to, size_t avail) const {
    Probe probe{p + from, to - from, loadHead(p + from, to - from, avail - from), 0};
    probe.hash = hashBytes(probe.p, probe.len, probe.head);
    __builtin_prefetch(&filter[filterBit(probe.hash) / 64]);
    __builtin_prefetch(&slots[probe.hash & slotMask]);
    return probe;
  }

  // The rank of a two-byte sequence, from a dense table: the first merges of every piece.
  uint32_t pairRank2(const uint8_t* p) const { return pairRanks[p[0] << 8 | p[1]]; }

  // BPE on one piece: repeatedly merge the adjacent pair whose concatenation has the lowest
  // rank (leftmost on ties), as tiktoken's byte_pair_merge does. Pieces up to
  // PieceCache::kMaxBytes go through this thread's cache first: words repeat.
  template <class Sink>
  void encodePiece(const uint8_t* p, size_t len, size_t avail, Sink& sink) const {
    if (len == 1) {
      sink(byteRank[p[0]]);
      return;
    }
    const uint64_t head = loadHead(p, len, avail);
    const uint64_t hash = hashBytes(p, len, head);
    PieceCache::Entry* cached = nullptr;
    if (len <= PieceCache::kMaxBytes) {
      cached = &pieceCache().slot(hash);
      if (cached->owner == generation && cached->hash == hash && cached->len == len &&
          load8(reinterpret_cast<const uint8_t*>(cached->bytes)) == head &&
          (len <= 8 || std::memcmp(cached->bytes + 8, p + 8, len - 8) == 0)) {
        for (uint8_t i = 0; i < cached->count; ++i)
          sink(cached->ids[i]);
        return;
      }
    }
    if (uint32_t r = findHashed(p, len, head, hash); r != kNoRank) {
      if (cached) cached->store(generation, hash, p, len, &r, 1);
      sink(r);
      return;
    }
    if (len <= kSmallPiece) {
      uint32_t ids[kSmallPiece];
      const size_t count = mergeSmall(p, len, avail, ids);
      if (cached && count <= PieceCache::kMaxIds)
        cached->store(generation, hash, p, len, ids, count);
      for (size_t i = 0; i < count; ++i)
        sink(ids[i]);
    } else {
      mergeLarge(p, len, avail, sink);
    }
  }

  static constexpr size_t kSmallPiece = 128;

  // Quadratic in the piece length but with tiny constants: the common case. Writes the ids to
  // `out` and returns how many.
  size_t mergeSmall(const uint8_t* p, size_t len, size_t avail, uint32_t* out) const {
    uint32_t start[kSmallPiece + 1];
    uint32_t rank[kSmallPiece + 1];  // rank of parts i and i+1 joined
    uint32_t self[kSmallPiece + 1];  // rank of part i itself
    size_t parts = len;              // number of parts; start[parts] = len
    for (size_t i = 0; i < len; ++i) {
      start[i] = static_cast<uint32_t>(i);
      self[i] = byteRank[p[i]];
    }
    start[len] = static_cast<uint32_t>(len);
    for (size_t i = 0; i + 1 < len; ++i)
      rank[i] = pairRank2(p + i);
    rank[len - 1] = kNoRank;
    rank[len] = kNoRank;
    auto pairRank = [&](size_t i) -> uint32_t {
      if (i + 2 > parts) return kNoRank;
      return find(p + start[i], start[i + 2] - start[i], avail - start[i]);
    };
    for (;;) {
      uint32_t best = kNoRank;
      size_t at = 0;
      for (size_t i = 0; i + 1 < parts; ++i) {
        if (rank[i] < best) {
          best = rank[i];
          at = i;
        }
      }
      if (best == kNoRank) break;
      // Merge parts at and at+1: the joined part is the token `best`.
      self[at] = best;
      for (size_t i = at + 1; i < parts; ++i) {
        start[i] = start[i + 1];
        rank[i] = rank[i + 1];
        self[i] = self[i + 1];
      }
      --parts;
      start[parts] = static_cast<uint32_t>(len);
      if (at > 0 && at + 2 <= parts) {
        // Both neighbours' pairs at once: the two table slots are fetched from memory together.
        const Probe right = probe(p, start[at], start[at + 2], avail);
        const Probe left = probe(p, start[at - 1], start[at + 1], avail);
        rank[at] = right.rank(*this);
        rank[at - 1] = left.rank(*this);
      } else {
        rank[at] = pairRank(at);
        if (at > 0) rank[at - 1] = pairRank(at - 1);
      }
    }
    std::memcpy(out, self, parts * sizeof(uint32_t));
    return parts;
  }

  // Linear-logarithmic for long pieces: a linked list of parts and a heap of candidate merges
  // keyed (rank, position); an entry is stale when its part died or its rank changed.
  template <class Sink>
  void mergeLarge(const uint8_t* p, size_t len, size_t avail, Sink& sink) const {
    std::vector<uint32_t> next(len), prev(len), rank(len);
    std::vector<uint8_t> alive(len, 1);
    using Entry = uint64_t;  // rank << 32 | position
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
    for (size_t i = 0; i < len; ++i) {
      next[i] = static_cast<uint32_t>(i + 1);
      prev[i] = static_cast<uint32_t>(i) - 1;
      rank[i] = i + 1 < len ? pairRank2(p + i) : kNoRank;
      if (rank[i] != kNoRank) heap.push(Entry{rank[i]} << 32 | i);
    }
    auto pairRank = [&](uint32_t i) -> uint32_t {
      uint32_t j = next[i];
      if (j >= len) return kNoRank;
      uint32_t end = next[j];
      return find(p + i, end - i, avail - i);
    };
    while (!heap.empty()) {
      const Entry e = heap.top();
      heap.pop();
      const auto i = static_cast<uint32_t>(e);
      const auto r = static_cast<uint32_t>(e >> 32);
      if (!alive[i] || rank[i] != r) continue;
      const uint32_t j = next[i];
      alive[j] = 0;
      next[i] = next[j];
      if (next[j] < len) prev[next[j]] = i;
      rank[i] = pairRank(i);
      if (rank[i] != kNoRank) heap.push(Entry{rank[i]} << 32 | i);
      if (i > 0) {
        const uint32_t h = prev[i];
        rank[h] = pairRank(h);
        if (rank[h] != kNoRank) heap.push(Entry{rank[h]} << 32 | h);
      }
    }
    for (uint32_t i = 0; i < len; i = next[i])
      sink(find(p + i, next[i] - i, avail - i));
  }

  template <class Sink>
  void encodeOrdinary(std::string_view text, Sink& sink) const {
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    size_t pos = 0;
    if (spec.pattern == SplitPattern::Cl100k) {
      while (pos < n) {
        const size_t end = detail::cl100kPieceEnd(s, n, pos);
        encodePiece(s + pos, end - pos, n - pos, sink);
        pos = end;
      }
    } else {
      while (pos < n) {
        const size_t end = detail::o200kPieceEnd(s, n, pos);
        encodePiece(s + pos, end - pos, n - pos, sink);
        pos = end;
      }
    }
  }

  template <class Sink>
  void encode(std::string_view text, const EncodeOptions& options, Sink& sink) const {
    std::string replaced;
    if (!isValidUtf8(text)) {
      replaced = replaceInvalidUtf8(text);
      text = replaced;
    }
    std::vector<std::pair<std::string_view, TokenId>> allowed;
    if (options.allowAllSpecial) {
      for (const auto& [t, id] : spec.specialTokens)
        allowed.emplace_back(t, id);
    } else {
      for (const std::string& name : options.allowedSpecial) {
        auto it = std::find_if(spec.specialTokens.begin(), spec.specialTokens.end(),
                               [&](const auto& s) { return s.first == name; });
        if (it == spec.specialTokens.end()) {
          throw ValidationError("allowedSpecial",
                                "\"" + name + "\" is not a special token of " + spec.name);
        }
        allowed.emplace_back(it->first, it->second);
      }
    }
    if (allowed.empty()) {
      encodeOrdinary(text, sink);
      return;
    }
    // Split at the earliest allowed special token (the longest one on a tie).
    std::vector<size_t> nextAt(allowed.size());
    for (size_t k = 0; k < allowed.size(); ++k)
      nextAt[k] = text.find(allowed[k].first);
    size_t pos = 0;
    for (;;) {
      size_t best = std::string_view::npos;
      size_t which = 0;
      for (size_t k = 0; k < allowed.size(); ++k) {
        if (nextAt[k] != std::string_view::npos && nextAt[k] < pos) {
          nextAt[k] = text.find(allowed[k].first, pos);
        }
        if (nextAt[k] < best || (nextAt[k] == best && best != std::string_view::npos &&
                                 allowed[k].first.size() > allowed[which].first.size())) {
          best = nextAt[k];
          which = k;
        }
      }
      if (best == std::string_view::npos) {
        encodeOrdinary(text.substr(pos), sink);
        return;
      }
      encodeOrdinary(text.substr(pos, best - pos), sink);
      sink(allowed[which].second);
      pos = best + allowed[which].first.size();
    }
  }
};

const EncodingSpec* findEncodingSpec(std::string_view name) noexcept {
  for (const EncodingSpec& s : allSpecs()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> knownEncodingNames() {
  std::vector<std::string> names;
  for (const EncodingSpec& s : allSpecs())
    names.push_back(s.name);
  return names;
}

Encoding::Encoding(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Encoding::~Encoding() = default;

std::shared_ptr<const Encoding> Encoding::fromRankFile(const EncodingSpec& spec,
                                                       const std::filesystem::path& file) {
  const std::filesystem::path tableDir = rankTableDir();
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info {};
  if (fd < 0 || ::fstat(fd, &info) != 0 || info.st_size <= 0) {
    if (fd >= 0) ::close(fd);
    throw Error("cannot read the rank file " + file.string());
  }
  const auto size = static_cast<size_t>(info.st_size);
  const std::filesystem::path table = tableDir.empty() || spec.sha256.size() != 64
                                          ? std::filesystem::path()
                                          : tableDir / rankTableFileName(spec);
  if (!table.empty()) {
    if (FileMapping image = mapRankTable(table, spec, size); image.data()) {
      ::close(fd);
      auto impl = std::make_unique<Impl>();
      impl->spec = spec;
      impl->attach(image.data());
      impl->mapped = std::move(image);
      return std::shared_ptr<const Encoding>(new Encoding(std::move(impl)));
    }
  }
  // Mapped, not copied: the kernel hands over the page cache's pages in one call.
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) throw Error("cannot read the rank file " + file.string());
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { ::munmap(p, n); }
  } unmap{mapped, size};
  const std::string_view rankText(static_cast<const char*>(mapped), size);
  auto encoding = fromRankText(spec, rankText);
  // Only the canonical vocabulary is kept as a table: one file, proved by its hash, serves
  // every copy of it (the build tree's, the installed one).
  if (!table.empty() && detail::sha256Hex(rankText) == spec.sha256) {
    writeRankTable(table, encoding->impl_->built);
  }
  return encoding;
}

std::shared_ptr<const Encoding> Encoding::fromRankText(const EncodingSpec& spec,
                                                       std::string_view rankText) {
  static constexpr auto kBase64 = [] {
    std::array<int, 256> t{};
    t.fill(-1);
    const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i)
      t[static_cast<uint8_t>(digits[i])] = i;
    return t;
  }();
  std::string blob;
  blob.resize(rankText.size() * 3 / 4 + 16);  // base64 never expands
  char* out = blob.data();
  size_t outLen = 0;
  std::vector<uint32_t> offsets;
  offsets.reserve(spec.rankCount + 1);
  auto malformed = [&](size_t line, const std::string& why) {
    return Error(spec.name + " rank file, line " + std::to_string(line + 1) + ": " + why);
  };
  const char* s = rankText.data();
  const size_t n = rankText.size();
  size_t pos = 0;
  for (size_t line = 0; pos < n; ++line) {
    offsets.push_back(static_cast<uint32_t>(outLen));
    // base64 token
    uint32_t acc = 0;
    int bits = 0;
    size_t i = pos;
    for (; i < n && s[i] != ' '; ++i) {
      if (s[i] == '=') continue;
      const int v = kBase64[static_cast<uint8_t>(s[i])];
      if (v < 0) throw malformed(line, "bad base64");
      acc = (acc << 6) | static_cast<uint32_t>(v);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out[outLen++] = static_cast<char>((acc >> bits) & 0xFF);
      }
    }
    if (i >= n || outLen == offsets.back()) {
      throw malformed(line, "expected \"<base64> <rank>\"");
    }
    // rank: must equal the line number (the canonical files are in rank order).
    ++i;
    uint64_t rank = 0;
    const size_t digitsAt = i;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; ++i)
      rank = rank * 10 + (s[i] - '0');
    if (i == digitsAt || (i < n && s[i] != '\n')) throw malformed(line, "bad rank");
    if (rank != line) throw malformed(line, "ranks are not in order");
    pos = i + 1;
  }
  if (offsets.size() != spec.rankCount) {
    throw Error(spec.name + " rank file has " + std::to_string(offsets.size()) +
                " tokens, expected " + std::to_string(spec.rankCount));
  }
  offsets.push_back(static_cast<uint32_t>(outLen));
  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  impl->built = buildRankTable(spec, std::string_view(blob.data(), outLen), offsets, n);
  impl->attach(impl->built.data());
  return std::shared_ptr<const Encoding>(new Encoding(std::move(impl)));
}

const std::string& Encoding::name() const noexcept {
  return impl_->spec.name;
}
const EncodingSpec& Encoding::spec() const noexcept {
  return impl_->spec;
}
std::size_t Encoding::rankCount() const noexcept {
  return impl_->rankCount();
}

std::vector<TokenId> Encoding::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 4 + 4);
  encodeInto(text, out, options);
  return out;
}

void Encoding::encodeInto(std::string_view text, std::vector<TokenId>& out,
                          const EncodeOptions& options) const {
  const std::vector<std::string_view> parts = partsFor(text, options);
  if (parts.size() == 1) {
    auto sink = [&out](TokenId id) { out.push_back(id); };
    impl_->encode(text, options, sink);
    return;
  }
  std::vector<std::vector<TokenId>> ids(parts.size());
  forEachPart(parts.size(), [&](size_t i) {
    ids[i].reserve(parts[i].size() / 4 + 4);
    auto sink = [&part = ids[i]](TokenId id) { part.push_back(id); };
    impl_->encode(parts[i], options, sink);
  });
  for (const auto& part : ids)
    out.insert(out.end(), part.begin(), part.end());
}

std::size_t Encoding::count(std::string_view text, const EncodeOptions& options) const {
  const std::vector<std::string_view> parts = partsFor(text, options);
  std::vector<std::size_t> counts(parts.size(), 0);
  auto countPart = [&](size_t i) {
    std::size_t n = 0;
    auto sink = [&n](TokenId) { ++n; };
    impl_->encode(parts[i], options, sink);
    counts[i] = n;
  };
  if (parts.size() == 1) {
    countPart(0);
  } else {
    forEachPart(parts.size(), countPart);
  }
  std::size_t total = 0;
  for (std::size_t n : counts)
    total += n;
  return total;
}

std::optional<std::string_view> Encoding::tokenBytes(TokenId id) const noexcept {
  if (id < impl_->rankCount()) return impl_->bytesOf(id);
  for (const auto& [text, special] : impl_->spec.specialTokens) {
    if (special == id) return std::string_view(text);
  }
  return std::nullopt;
}

std::string Encoding::decode(std::span<const TokenId> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (TokenId id : ids) {
    auto bytes = tokenBytes(id);
    if (!bytes) {
      throw ValidationError("ids", std::to_string(id) + " is not a token of " + name());
    }
    out.append(*bytes);
  }
  return out;
}

std::optional<TokenId> Encoding::specialTokenId(std::string_view text) const noexcept {
  for (const auto& [t, id] : impl_->spec.specialTokens) {
    if (t == text) return id;
  }
  return std::nullopt;
}

}  // namespace parley

// A persistent vector: copying it is O(1) and copies share structure.
//
// A 32-way trie with a tail buffer (the layout of Clojure's PersistentVector). A copy shares
// every node; a write copies only the nodes on its path that are shared with another copy, so
// a fork of a 100 000-element vector costs one pointer copy and its first append copies at most
// the tail and one path of the trie. Appends are amortised O(1); indexing is O(log32 n).
//
// Thread-safety: like std::vector. Distinct copies may be used from distinct threads at the
// same time (shared nodes are never written: a node is written in place only when its
// reference count says this copy is its only owner). One copy needs external locking if it is
// written while read.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace parley::detail {

template <class T>
class PersistentVector {
 public:
  static constexpr unsigned kBits = 5;
  static constexpr size_t kWidth = size_t{1} << kBits;
  static constexpr size_t kMask = kWidth - 1;

  PersistentVector() = default;

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  const T& operator[](size_t i) const {
    assert(i < size_);
    return leafFor(i)->values[i & kMask];
  }
  const T& back() const { return (*this)[size_ - 1]; }

  void push_back(T value) {
    if (!tail_) {
      tail_ = std::make_shared<Leaf>();
    } else if (size_ - tailOffset() == kWidth) {
      pushTailIntoTrie();
      tail_ = std::make_shared<Leaf>();
    } else if (!ownedAlone(tail_)) {
      tail_ = std::make_shared<Leaf>(*tail_);
    }
    tail_->values[size_ & kMask] = std::move(value);
    ++size_;
  }

  // Replaces element i, copying the shared nodes on its path.
  void set(size_t i, T value) {
    assert(i < size_);
    if (i >= tailOffset()) {
      if (!ownedAlone(tail_)) tail_ = std::make_shared<Leaf>(*tail_);
      tail_->values[i & kMask] = std::move(value);
      return;
    }
    std::shared_ptr<void>* slot = &root_;
    for (unsigned level = shift_; level > 0; level -= kBits) {
      slot = &unique<Inner>(*slot)->children[(i >> level) & kMask];
    }
    unique<Leaf>(*slot)->values[i & kMask] = std::move(value);
  }

  void clear() { *this = PersistentVector(); }

  // Calls fn(element) for i in [begin, end), a leaf at a time.
  template <class F>
  void forEach(size_t begin, size_t end, F&& fn) const {
    assert(begin <= end && end <= size_);
    size_t i = begin;
    while (i < end) {
      const Leaf* leaf = leafFor(i);
      size_t stop = std::min(end, (i | kMask) + 1);
      for (; i < stop; ++i)
        fn(leaf->values[i & kMask]);
    }
  }

  std::vector<T> toVector() const {
    std::vector<T> out;
    out.reserve(size_);
    forEach(0, size_, [&](const T& v) { out.push_back(v); });
    return out;
  }

  static PersistentVector fromVector(const std::vector<T>& values) {
    PersistentVector v;
    for (const T& value : values)
      v.push_back(value);
    return v;
  }

  friend bool operator==(const PersistentVector& a, const PersistentVector& b) {
    if (a.size_ != b.size_) return false;
    for (size_t i = 0; i < a.size_; ++i) {
      if (!(a[i] == b[i])) return false;
    }
    return true;
  }

 private:
  struct Leaf {
    std::array<T, kWidth> values{};
  };
  struct Inner {
    // Children are Inner nodes, or Leaf nodes on the level just above the leaves.
    std::array<std::shared_ptr<void>, kWidth> children{};
  };

  size_t tailOffset() const noexcept { return size_ < kWidth ? 0 : ((size_ - 1) & ~kMask); }

  const Leaf* leafFor(size_t i) const {
    if (i >= tailOffset()) return tail_.get();
    const void* node = root_.get();
    for (unsigned level = shift_; level > 0; level -= kBits) {
      node = static_cast<const Inner*>(node)->children[(i >> level) & kMask].get();
    }
    return static_cast<const Leaf*>(node);
  }

  // Whether this vector alone holds `node`, so it may be written in place. The acquire fence
  // pairs with the release in another copy's reference drop, so that copy's reads of the node
  // happen before our write. ThreadSanitizer cannot follow a fence: under it nodes are always
  // copied (the same results, more allocations), so that it checks everything else soundly.
  template <class P>
  static bool ownedAlone(const P& node) {
#if defined(__SANITIZE_THREAD__)
    (void)node;
    return false;
#else
    if (node.use_count() != 1) return false;
    std::atomic_thread_fence(std::memory_order_acquire);
    return true;
#endif
  }

  // Makes the node in `slot` exclusively ours before a write.
  template <class N>
  static N* unique(std::shared_ptr<void>& slot) {
    if (ownedAlone(slot)) return static_cast<N*>(slot.get());
    auto copy = std::make_shared<N>(*static_cast<const N*>(slot.get()));
    N* raw = copy.get();
    slot = std::move(copy);
    return raw;
  }

  void pushTailIntoTrie() {
    // The full tail becomes the trie's leaf number leafIndex / kWidth.
    const size_t leafIndex = size_ - kWidth;
    std::shared_ptr<void> leaf = std::move(tail_);
    if (!root_) {
      root_ = std::move(leaf);
      shift_ = 0;
      return;
    }
    if ((leafIndex >> kBits) >= (size_t{1} << shift_)) {  // full at this height: add a level
      auto newRoot = std::make_shared<Inner>();
      newRoot->children[0] = std::move(root_);
      newRoot->children[1] = newPath(shift_, std::move(leaf));
      root_ = std::move(newRoot);
      shift_ += kBits;
      return;
    }
    Inner* node = unique<Inner>(root_);
    for (unsigned level = shift_; level > kBits; level -= kBits) {
      auto& child = node->children[(leafIndex >> level) & kMask];
      if (!child) {
        child = newPath(level - kBits, std::move(leaf));
        return;
      }
      node = unique<Inner>(child);
    }
    node->children[(leafIndex >> kBits) & kMask] = std::move(leaf);
  }

  static std::shared_ptr<void> newPath(unsigned level, std::shared_ptr<void> leaf) {
    if (level == 0) return leaf;
    auto node = std::make_shared<Inner>();
    node->children[0] = newPath(level - kBits, std::move(leaf));
    return node;
  }

  size_t size_ = 0;
  unsigned shift_ = 0;          // height of the trie in bits above the leaves
  std::shared_ptr<void> root_;  // a Leaf when shift_ == 0, else an Inner
  std::shared_ptr<Leaf> tail_;
};

}  // namespace parley::detail

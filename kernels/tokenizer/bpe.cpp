// kernels/tokenizer/bpe.cpp
// The merge loop (a min-heap of candidate pairs over a linked list of symbols), an
// open-addressing pair -> (rank, merged) table, and the word cache.
#include "kernels/tokenizer/bpe.hpp"

#include <mutex>
#include <queue>
#include <shared_mutex>
#include <string>
#include <unordered_map>

namespace moe {

/// (left, right) -> (rank, merged), linear probing in a power-of-two table at most half full.
struct bpe_model::merge_table {
  struct slot {
    uint64_t key = empty;
    int32_t rank = 0, merged = 0;
  };
  static constexpr uint64_t empty = ~uint64_t{0};
  std::vector<slot> slots;
  uint64_t mask = 0;
  int shift = 0;

  explicit merge_table(const std::vector<bpe_merge>& merges) {
    size_t capacity = 16;
    while (capacity < merges.size() * 2)
      capacity *= 2;
    slots.resize(capacity);
    mask = capacity - 1;
    shift = 64 - __builtin_ctzll(capacity);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const bpe_merge& m = merges[rank];
      slot& s = find_slot(key_of(m.left, m.right));
      s = {key_of(m.left, m.right), static_cast<int32_t>(rank), m.merged};
    }
  }

  static uint64_t key_of(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }

  slot& find_slot(uint64_t key) { return slots[const_cast<const merge_table*>(this)->index_of(key)]; }

  size_t index_of(uint64_t key) const {
    size_t idx = (key * 0x9E3779B97F4A7C15ull) >> shift;
    while (slots[idx].key != key && slots[idx].key != empty)
      idx = (idx + 1) & mask;
    return idx;
  }

  const slot* find(int32_t left, int32_t right) const {
    const slot& s = slots[index_of(key_of(left, right))];
    return s.key == empty ? nullptr : &s;
  }
};

/// word bytes -> tokens; cleared when full (words repeat, so it refills with the common ones).
struct bpe_model::word_cache {
  static constexpr size_t max_entries = 1 << 17;
  static constexpr size_t max_word_bytes = 256;  // longer words are rare and not worth keeping

  struct hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::shared_mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>, hash, std::equal_to<>> words;

  bool lookup(std::string_view word, std::vector<int32_t>& out) const {
    std::shared_lock lock(mutex);
    const auto it = words.find(word);
    if (it == words.end())
      return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void store(std::string_view word, const int32_t* tokens, size_t num_tokens) {
    if (word.size() > max_word_bytes)
      return;
    std::unique_lock lock(mutex);
    if (words.size() >= max_entries)
      words.clear();
    words.try_emplace(std::string(word), tokens, tokens + num_tokens);
  }
};

bpe_model::bpe_model(const std::array<int32_t, 256>& byte_ids, const std::vector<bpe_merge>& merges)
    : byte_ids_(byte_ids), merges_(std::make_unique<merge_table>(merges)),
      cache_(std::make_unique<word_cache>()) {}

bpe_model::~bpe_model() = default;

void bpe_model::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(word[0])];
    if (id >= 0)
      out.push_back(id);
    return;
  }
  if (word.size() == 2) {  // at most one merge: no cache needed
    const int32_t left = byte_ids_[static_cast<unsigned char>(word[0])];
    const int32_t right = byte_ids_[static_cast<unsigned char>(word[1])];
    if (left >= 0 && right >= 0) {
      if (const auto* m = merges_->find(left, right))
        out.push_back(m->merged);
      else
        out.insert(out.end(), {left, right});
      return;
    }
  }
  if (cache_->lookup(word, out))
    return;
  const size_t first = out.size();
  merge(word, out);
  cache_->store(word, out.data() + first, out.size() - first);
}

void bpe_model::merge(std::string_view word, std::vector<int32_t>& out) const {
  struct symbol {
    int32_t id, prev, next;
    bool alive;
  };
  struct candidate {
    int32_t rank, pos, merged, left, right;
    bool operator>(const candidate& o) const {  // lowest rank first, then leftmost
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };

  std::vector<symbol> symbols;
  symbols.reserve(word.size());
  for (const char c : word) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id < 0)
      continue;
    const auto idx = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, idx - 1, idx + 1, true});
  }
  if (symbols.empty())
    return;
  symbols.back().next = -1;

  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0)
      return;
    if (const auto* m = merges_->find(symbols[pos].id, symbols[next].id))
      queue.push({m->rank, pos, m->merged, symbols[pos].id, symbols[next].id});
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos)
    push_pair(pos);

  while (!queue.empty()) {
    const candidate top = queue.top();
    queue.pop();
    symbol& left = symbols[top.pos];
    // stale if either side changed since the candidate was pushed
    if (!left.alive || left.next < 0 || left.id != top.left || symbols[left.next].id != top.right)
      continue;
    symbol& right = symbols[left.next];
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0)
      symbols[right.next].prev = top.pos;
    if (left.prev >= 0)
      push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t pos = 0; pos >= 0; pos = symbols[pos].next)
    out.push_back(symbols[pos].id);
}

}  // namespace moe

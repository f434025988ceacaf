// kernels/tokenizer/tokenizer.cpp
// The tokenizer: id tables built from the HF files, then encode (added tokens -> pre-tokenizer ->
// BPE per piece) and decode (bytes per id, then invalid UTF-8 -> U+FFFD).
#include "kernels/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "config/model_config.hpp"
#include "kernels/tokenizer/added_tokens.hpp"
#include "kernels/tokenizer/bpe.hpp"
#include "kernels/tokenizer/byte_level.hpp"
#include "kernels/tokenizer/pre_tokenizer.hpp"
#include "kernels/tokenizer/tokenizer_json.hpp"
#include "kernels/tokenizer/utf8.hpp"

namespace moe {
namespace {

/// DeepSeek-V3's BOS/EOS, used when there is no tokenizer_config.json to name them.
constexpr const char* default_bos = "<｜begin▁of▁sentence｜>";
constexpr const char* default_eos = "<｜end▁of▁sentence｜>";

enum class token_kind : uint8_t { unused, normal, special };

using token_map = std::unordered_map<std::string, int32_t>;

int32_t find_or(const token_map& ids, const std::string& token, int32_t fallback) {
  const auto it = ids.find(token);
  return it == ids.end() ? fallback : it->second;
}

std::vector<bpe_merge> merges_by_id(const tokenizer_files& files, const token_map& vocab_ids,
                                    const std::string& origin) {
  std::vector<bpe_merge> merges;
  merges.reserve(files.merges.size());
  for (const auto& [left, right] : files.merges) {
    const bpe_merge m{find_or(vocab_ids, left, -1), find_or(vocab_ids, right, -1),
                      find_or(vocab_ids, left + right, -1)};
    if (m.left < 0 || m.right < 0 || m.merged < 0)
      throw input_error(origin + ": merge '" + left + " " + right + "' uses a token not in the vocab");
    merges.push_back(m);
  }
  return merges;
}

}  // namespace

struct tokenizer::impl {
  std::vector<std::string> id_bytes;  // [vocab_size] raw bytes of each token
  std::vector<token_kind> kinds;      // [vocab_size]
  token_map token_ids;                // HF token text (byte-level or content) -> id
  std::unique_ptr<added_token_matcher> added;
  std::unique_ptr<pre_tokenizer> pre;
  std::unique_ptr<bpe_model> bpe;
  int32_t bos = -1, eos = -1;
};

tokenizer::tokenizer() : impl_(std::make_unique<impl>()) {}
tokenizer::~tokenizer() = default;

std::shared_ptr<const tokenizer> tokenizer::load(const std::filesystem::path& dir) {
  const tokenizer_files files = read_tokenizer_files(dir);
  const std::string origin = (dir / "tokenizer.json").string();
  std::shared_ptr<tokenizer> tok(new tokenizer());
  impl& m = *tok->impl_;

  int32_t max_id = -1;
  for (const auto& [text, id] : files.vocab)
    max_id = std::max(max_id, id);
  for (const added_token& t : files.added_tokens)
    max_id = std::max(max_id, t.id);
  if (max_id < 0 ||
      std::any_of(files.vocab.begin(), files.vocab.end(), [](const auto& entry) { return entry.second < 0; }))
    throw input_error(origin + ": the vocab is empty or has a negative id");
  m.id_bytes.resize(static_cast<size_t>(max_id) + 1);
  m.kinds.resize(m.id_bytes.size(), token_kind::unused);

  token_map vocab_ids;
  vocab_ids.reserve(files.vocab.size());
  for (const auto& [text, id] : files.vocab) {
    vocab_ids.emplace(text, id);
    m.id_bytes[id] = byte_level::to_bytes(text).value_or(text);  // as HF's ByteLevel decoder
    m.kinds[id] = token_kind::normal;
  }
  std::array<int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b)
    byte_ids[b] = find_or(vocab_ids, byte_level::to_text(std::string(1, static_cast<char>(b))), -1);
  m.bpe = std::make_unique<bpe_model>(byte_ids, merges_by_id(files, vocab_ids, origin));

  m.token_ids = std::move(vocab_ids);
  for (const added_token& t : files.added_tokens) {
    if (t.id < 0)
      throw input_error(origin + ": added token '" + t.content + "' has a negative id");
    m.token_ids[t.content] = t.id;
    m.id_bytes[t.id] = t.content;
    m.kinds[t.id] = t.special ? token_kind::special : token_kind::normal;
  }
  m.added = std::make_unique<added_token_matcher>(files.added_tokens);
  m.pre = std::make_unique<pre_tokenizer>(files.split_patterns, origin);

  const std::string config_origin = (dir / "tokenizer_config.json").string();
  auto named_token = [&](const std::string& content, const char* fallback, const char* what) {
    if (content.empty())
      return find_or(m.token_ids, fallback, -1);
    const int32_t id = find_or(m.token_ids, content, -1);
    if (id < 0)
      throw input_error(config_origin + ": " + what + " '" + content + "' is not a token");
    return id;
  };
  m.bos = named_token(files.bos_token, default_bos, "bos_token");
  m.eos = named_token(files.eos_token, default_eos, "eos_token");
  return tok;
}

std::vector<int32_t> tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos) {
    if (impl_->bos < 0)
      throw input_error("this tokenizer has no BOS token");
    ids.push_back(impl_->bos);
  }
  std::vector<text_segment> segments;
  impl_->added->split(text, segments);
  for (const text_segment& segment : segments) {
    if (segment.token_id >= 0)
      ids.push_back(segment.token_id);
    else
      impl_->pre->split(segment.text, [&](std::string_view word) { impl_->bpe->encode_word(word, ids); });
  }
  return ids;
}

std::string tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      continue;  // unknown ids are skipped, as HF does
    if (skip_special && impl_->kinds[id] == token_kind::special)
      continue;
    bytes += impl_->id_bytes[id];
  }
  std::string text;
  text.reserve(bytes.size());
  utf8::append_lossy(text, bytes);
  return text;
}

std::string tokenizer::token_bytes(int32_t id) const {
  return id >= 0 && id < vocab_size() ? impl_->id_bytes[id] : std::string();
}

std::optional<int32_t> tokenizer::token_id(std::string_view token) const {
  const auto it = impl_->token_ids.find(std::string(token));
  if (it == impl_->token_ids.end())
    return std::nullopt;
  return it->second;
}

bool tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->kinds[id] == token_kind::special;
}

int32_t tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_bytes.size()); }
int32_t tokenizer::bos_id() const { return impl_->bos; }
int32_t tokenizer::eos_id() const { return impl_->eos; }

}  // namespace moe

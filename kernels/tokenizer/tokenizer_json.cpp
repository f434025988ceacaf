// kernels/tokenizer/tokenizer_json.cpp
// nlohmann_json over the HF files; every unsupported option is an error, never ignored.
#include "kernels/tokenizer/tokenizer_json.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "config/model_config.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

/// GPT-2's split regex, used by a ByteLevel pre-tokenizer with use_regex true.
constexpr const char* gpt2_pattern =
  R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

json read_json(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw input_error("cannot open " + file.string());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw input_error(file.string() + ": malformed JSON: " + e.what());
  }
}

/// A value that must be null, absent or equal to `expected`.
bool is_default(const json& obj, const char* key, const json& expected) {
  return !obj.contains(key) || obj[key].is_null() || obj[key] == expected;
}

/// A regex for a Split pattern ({"Regex": ...} or {"String": ...}, the latter quoted).
std::string split_regex(const json& pattern, const std::string& origin) {
  if (pattern.contains("Regex"))
    return pattern["Regex"].get<std::string>();
  if (pattern.contains("String")) {
    std::string quoted;
    for (const char c : pattern["String"].get<std::string>()) {
      if (std::string_view(R"(\^$.|?*+()[]{}/-)").find(c) != std::string_view::npos)
        quoted += '\\';
      quoted += c;
    }
    return quoted;
  }
  throw input_error(origin + ": Split pattern is neither Regex nor String");
}

void add_pre_tokenizer(const json& pt, tokenizer_files& out, bool& byte_level, const std::string& origin) {
  const std::string type = pt.value("type", "");
  if (type == "Sequence") {
    for (const json& inner : pt.at("pretokenizers"))
      add_pre_tokenizer(inner, out, byte_level, origin);
  } else if (type == "Split") {
    if (pt.value("behavior", "") != "Isolated" || pt.value("invert", false))
      throw input_error(origin + ": only Split with behavior Isolated and invert false is supported");
    if (byte_level)
      throw input_error(origin + ": a Split after the ByteLevel pre-tokenizer is not supported");
    out.split_patterns.push_back(split_regex(pt.at("pattern"), origin));
  } else if (type == "ByteLevel") {
    if (pt.value("add_prefix_space", false))
      throw input_error(origin + ": ByteLevel add_prefix_space true is not supported");
    if (pt.value("use_regex", true))
      out.split_patterns.push_back(gpt2_pattern);
    byte_level = true;
  } else {
    throw input_error(origin + ": unsupported pre_tokenizer type '" + type + "'");
  }
}

void read_model(const json& model, tokenizer_files& out, const std::string& origin) {
  if (model.value("type", "") != "BPE")
    throw input_error(origin + ": model type must be BPE");
  if (!is_default(model, "byte_fallback", false) || !is_default(model, "ignore_merges", false) ||
      !is_default(model, "continuing_subword_prefix", "") || !is_default(model, "end_of_word_suffix", "") ||
      !is_default(model, "dropout", 0.0))
    throw input_error(origin + ": BPE byte_fallback, ignore_merges, continuing_subword_prefix, "
                               "end_of_word_suffix and dropout are not supported");
  for (const auto& [token, id] : model.at("vocab").items())
    out.vocab.emplace_back(token, id.get<int32_t>());
  for (const json& merge : model.at("merges")) {
    if (merge.is_array() && merge.size() == 2) {
      out.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      continue;
    }
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
      throw input_error(origin + ": merge '" + text + "' is not two tokens");
    out.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
  }
}

void read_added_tokens(const json& tokens, tokenizer_files& out) {
  for (const json& t : tokens) {
    added_token token;
    token.id = t.at("id").get<int32_t>();
    token.content = t.at("content").get<std::string>();
    token.special = t.value("special", false);
    token.single_word = t.value("single_word", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.normalized = t.value("normalized", !token.special);
    out.added_tokens.push_back(std::move(token));
  }
}

/// A token in tokenizer_config.json: a string or an AddedToken object.
std::string token_content(const json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null())
    return {};
  const json& token = config[key];
  return token.is_string() ? token.get<std::string>() : token.at("content").get<std::string>();
}

}  // namespace

tokenizer_files read_tokenizer_files(const std::filesystem::path& dir) {
  tokenizer_files out;
  const std::filesystem::path main_file = dir / "tokenizer.json";
  const std::string origin = main_file.string();
  if (!std::filesystem::exists(main_file))
    throw input_error("missing " + origin);
  const json root = read_json(main_file);
  try {
    const json& normalizer = root.value("normalizer", json());
    if (!normalizer.is_null() && !(normalizer.value("type", "") == "Sequence" &&
                                   normalizer.value("normalizers", json::array()).empty()))
      throw input_error(origin + ": normalizers are not supported");
    bool byte_level = false;
    if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null())
      add_pre_tokenizer(root["pre_tokenizer"], out, byte_level, origin);
    if (!byte_level)
      throw input_error(origin + ": a ByteLevel pre-tokenizer is required");
    const json& decoder = root.value("decoder", json());
    if (decoder.is_null() || decoder.value("type", "") != "ByteLevel")
      throw input_error(origin + ": the decoder must be ByteLevel");
    read_model(root.at("model"), out, origin);
    read_added_tokens(root.value("added_tokens", json::array()), out);
  } catch (const json::exception& e) {
    throw input_error(origin + ": " + e.what());
  }

  const std::filesystem::path config_file = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_file)) {
    const json config = read_json(config_file);
    try {
      out.bos_token = token_content(config, "bos_token");
      out.eos_token = token_content(config, "eos_token");
    } catch (const json::exception& e) {
      throw input_error(config_file.string() + ": " + e.what());
    }
  }
  return out;
}

}  // namespace moe

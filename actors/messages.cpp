// actors/messages.cpp
// The inspect functions of messages.hpp that check what they read.
#include "actors/messages.hpp"

#include <caf/sec.hpp>

namespace moe {
namespace {

caf::error bad_value() { return caf::make_error(caf::sec::invalid_argument); }

constexpr uint64_t max_expert_blob_bytes = uint64_t{1} << 32;  // 4 GiB: one expert, far above V3's

}  // namespace

caf::error inspect(caf::serializer& f, token_chunk& x) {
  auto reason = static_cast<uint8_t>(x.reason);
  return f(caf::meta::type_name("token_chunk"), x.request_id, x.token_ids, reason, x.error, x.logprobs);
}

caf::error inspect(caf::deserializer& f, token_chunk& x) {
  uint8_t reason = 0;
  if (auto err = f(caf::meta::type_name("token_chunk"), x.request_id, x.token_ids, reason, x.error,
                   x.logprobs))
    return err;
  if (reason > static_cast<uint8_t>(finish_reason::error))
    return bad_value();
  x.reason = static_cast<finish_reason>(reason);
  return {};
}

caf::error inspect(caf::serializer& f, expert_blob& x) {
  uint64_t n = x.bytes.size();
  if (auto err = f(caf::meta::type_name("expert_blob"), x.layer, x.expert, n))
    return err;
  return n > 0 ? f.apply_raw(n, x.bytes.data()) : caf::error{};
}

caf::error inspect(caf::deserializer& f, expert_blob& x) {
  uint64_t n = 0;
  if (auto err = f(caf::meta::type_name("expert_blob"), x.layer, x.expert, n))
    return err;
  if (x.layer < 0 || x.expert < 0 || n > max_expert_blob_bytes)
    return bad_value();
  x.bytes.resize(n);
  return n > 0 ? f.apply_raw(n, x.bytes.data()) : caf::error{};
}

caf::error inspect(caf::serializer& f, placement_change& x) {
  bool has_placements = x.placements != nullptr;
  std::vector<layer_placement> placements = has_placements ? *x.placements : std::vector<layer_placement>{};
  return f(caf::meta::type_name("placement_change"), x.epoch, x.membership_first_step, has_placements,
           placements);
}

caf::error inspect(caf::deserializer& f, placement_change& x) {
  bool has_placements = false;
  std::vector<layer_placement> placements;
  if (auto err = f(caf::meta::type_name("placement_change"), x.epoch, x.membership_first_step, has_placements,
                   placements))
    return err;
  if (has_placements && !consistent(placements))
    return bad_value();
  x.placements = has_placements ? std::make_shared<const std::vector<layer_placement>>(std::move(placements))
                                : nullptr;
  return {};
}

caf::error inspect(caf::serializer& f, kv_handoff& x) {
  return f(caf::meta::type_name("kv_handoff"), x.request_id, x.spec, x.pages, x.first_token, x.session,
           x.sent_at_ns);
}

caf::error inspect(caf::deserializer& f, kv_handoff& x) {
  if (auto err = f(caf::meta::type_name("kv_handoff"), x.request_id, x.spec, x.pages, x.first_token,
                   x.session, x.sent_at_ns))
    return err;
  if (x.spec.num_generated < 0 || x.spec.num_generated > static_cast<int64_t>(x.spec.prompt_ids.size()) ||
      !validate(x.spec.sampling).empty())
    return bad_value();
  x.pick = sampler_after_prefill(x.spec, x.first_token);
  return {};
}

std::shared_ptr<sampler> sampler_after_prefill(const request_spec& spec, int32_t first_token) {
  const auto& prompt = spec.prompt_ids;
  const auto num_generated = static_cast<std::ptrdiff_t>(spec.num_generated);
  auto pick = std::make_shared<sampler>(spec.sampling,
                                        std::vector<int32_t>(prompt.begin(), prompt.end() - num_generated));
  std::vector<int32_t> generated(prompt.end() - num_generated, prompt.end());
  generated.push_back(first_token);
  pick->resume_after(generated);
  return pick;
}

}  // namespace moe

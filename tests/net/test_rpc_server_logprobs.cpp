// tests/net/test_rpc_server_logprobs.cpp
// logprobs through the server: the streamed 5th element equals the final `logprobs`, each top
// list is N long, sorted and a sub-distribution, greedy samples its maximum, and every value is
// log_softmax of the single-rank path's raw logits (also under temperature: raw, not scaled).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "net/server_fixture.hpp"
#include "net/wire.hpp"

using namespace moe;
using namespace moe::testing;

namespace {

struct wire_logprobs {
  int32_t token_id = 0;
  double logprob = 0.0;
  std::vector<std::pair<int32_t, double>> top;
  bool float32 = true;  // every logprob on the wire is a msgpack float32
};

/// [0, msgid, "generate", [{input_ids, max_tokens, ignore_eos, stream, temperature, seed, logprobs?}]]
std::string generate_logprobs(uint32_t msgid, const std::vector<int32_t>& ids, int32_t max_tokens,
                              float temperature, std::optional<int32_t> logprobs) {
  return packed([&](packer& pk) {
    pk.pack_array(4).pack(0).pack(msgid).pack("generate").pack_array(1).pack_map(logprobs ? 7 : 6);
    pk.pack("input_ids").pack(ids).pack("max_tokens").pack(max_tokens);
    pk.pack("ignore_eos").pack(true).pack("stream").pack(true);
    pk.pack("temperature").pack(temperature).pack("seed").pack(7);
    if (logprobs)
      pk.pack("logprobs").pack(*logprobs);
  });
}

std::vector<wire_logprobs> parse_logprobs(const msgpack::object& array) {
  std::vector<wire_logprobs> out;
  for (const auto& m : array.as<std::vector<std::map<std::string, msgpack::object>>>()) {
    wire_logprobs t;
    t.token_id = m.at("token_id").as<int32_t>();
    t.logprob = m.at("logprob").as<double>();
    t.float32 = m.at("logprob").type == msgpack::type::FLOAT32;
    for (const auto& pair : m.at("top_logprobs").as<std::vector<msgpack::object>>()) {
      const auto [id, value] = pair.as<std::tuple<int32_t, msgpack::object>>();
      t.top.emplace_back(id, value.as<double>());
      t.float32 = t.float32 && value.type == msgpack::type::FLOAT32;
    }
    out.push_back(std::move(t));
  }
  return out;
}

/// Every "token" notification's 5th element, in order (each must have one).
std::vector<wire_logprobs> streamed_logprobs(const std::vector<net::rpc_notification>& notes) {
  std::vector<wire_logprobs> out;
  for (const auto& n : notes) {
    REQUIRE(n.params.via.array.size == 5);
    for (wire_logprobs& t : parse_logprobs(n.params.via.array.ptr[4]))
      out.push_back(std::move(t));
  }
  return out;
}

/// log_softmax of one row in double, written out here independently of logprobs_of.
std::vector<double> log_softmax(const float* row, size_t vocab) {
  const double max_logit = *std::max_element(row, row + vocab);
  double sum = 0.0;
  for (size_t i = 0; i < vocab; ++i)
    sum += std::exp(static_cast<double>(row[i]) - max_logit);
  std::vector<double> out(vocab);
  for (size_t i = 0; i < vocab; ++i)
    out[i] = static_cast<double>(row[i]) - max_logit - std::log(sum);
  return out;
}

constexpr double tolerance = 1e-4;  // float32 on the wire; decode steps vs one prefill

}  // namespace

TEST_CASE_FIXTURE(server_fixture,
                  "logprobs are the raw log_softmax of the model's logits, streamed and final") {
  if (skip_without_tokenizer())
    return;
  start();
  const std::vector<int32_t> prompt{0, 21, 22, 23, 24};
  const size_t vocab = 1000;
  for (const float temperature : {0.0f, 0.7f}) {
    CAPTURE(temperature);
    const int32_t num_top = temperature == 0.0f ? 5 : 3;
    test_client client(server->port());
    client.send(generate_logprobs(1, prompt, 6, temperature, num_top));
    std::vector<net::rpc_notification> notes;
    const net::rpc_response r = client.next_response(&notes);
    REQUIRE(error_code(r) == 0);
    const auto result = result_map(r);
    const auto output_ids = result.at("output_ids").as<std::vector<int32_t>>();
    REQUIRE(output_ids.size() == 6);
    const std::vector<wire_logprobs> final_lp = parse_logprobs(result.at("logprobs"));
    const std::vector<wire_logprobs> streamed_lp = streamed_logprobs(notes);
    REQUIRE(final_lp.size() == output_ids.size());
    REQUIRE(streamed_lp.size() == output_ids.size());

    // the single-rank path's logits over prompt + output: row prompt.size() - 1 + k is token k's
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), output_ids.begin(), output_ids.end() - 1);
    const std::vector<float> logits = reference_logits(ids);
    for (size_t k = 0; k < output_ids.size(); ++k) {
      CAPTURE(k);
      const wire_logprobs& lp = final_lp[k];
      CHECK(lp.float32);
      CHECK(lp.token_id == output_ids[k]);
      CHECK(streamed_lp[k].token_id == lp.token_id);
      CHECK(streamed_lp[k].logprob == lp.logprob);
      CHECK(streamed_lp[k].top == lp.top);
      REQUIRE(lp.top.size() == static_cast<size_t>(num_top));
      double sum = 0.0;
      for (size_t j = 0; j < lp.top.size(); ++j) {
        CHECK(lp.top[j].second <= 0.0);
        if (j > 0)
          CHECK(lp.top[j].second <= lp.top[j - 1].second);
        sum += std::exp(lp.top[j].second);
      }
      CHECK(std::log(sum) <= 1e-6);  // a part of one distribution
      if (temperature == 0.0f) {     // greedy samples the maximum
        CHECK(lp.top[0].first == lp.token_id);
        CHECK(lp.logprob == lp.top[0].second);
      }
      const size_t row = prompt.size() - 1 + k;
      const std::vector<double> want = log_softmax(logits.data() + row * vocab, vocab);
      CHECK(lp.logprob == doctest::Approx(want[static_cast<size_t>(lp.token_id)]).epsilon(tolerance));
      for (const auto& [id, value] : lp.top)
        CHECK(value == doctest::Approx(want[static_cast<size_t>(id)]).epsilon(tolerance));
      const double least_listed = lp.top.back().second;  // nobody left out is more likely
      for (size_t id = 0; id < vocab; ++id)
        if (std::none_of(lp.top.begin(), lp.top.end(),
                         [&](const auto& e) { return e.first == static_cast<int32_t>(id); }))
          CHECK(want[id] <= least_listed + tolerance);
    }
  }
}

TEST_CASE_FIXTURE(server_fixture,
                  "logprobs 0 gives the sampled token's only, and none asked means none sent") {
  if (skip_without_tokenizer())
    return;
  start();
  test_client client(server->port());
  client.send(generate_logprobs(1, {0, 40, 41}, 3, 0.0f, 0));
  std::vector<net::rpc_notification> notes;
  net::rpc_response r = client.next_response(&notes);
  REQUIRE(error_code(r) == 0);
  const std::vector<wire_logprobs> lp = parse_logprobs(result_map(r).at("logprobs"));
  REQUIRE(lp.size() == 3);
  for (const wire_logprobs& t : lp) {
    CHECK(t.top.empty());
    CHECK(t.logprob <= 0.0);
  }
  CHECK(streamed_logprobs(notes).size() == 3);

  notes.clear();
  client.send(generate_logprobs(2, {0, 40, 41}, 3, 0.0f, std::nullopt));
  r = client.next_response(&notes);
  REQUIRE(error_code(r) == 0);
  CHECK(result_map(r).count("logprobs") == 0);
  REQUIRE_FALSE(notes.empty());
  for (const auto& n : notes)
    CHECK(n.params.via.array.size == 4);
}

// tests/actors/test_trace_recorder.cpp
// Trace Event JSON parsed back, and lane unions / overlap on hand-made spans.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "actors/trace_recorder.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

const std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::time_point{} + 1s;

trace_span span(int64_t rank, trace_lane lane, std::chrono::microseconds begin, std::chrono::microseconds end,
                std::string name = "x") {
  return {.rank = rank,
          .lane = lane,
          .name = std::move(name),
          .category = "decode",
          .begin = t0 + begin,
          .end = t0 + end};
}

constexpr auto compute = trace_lane::compute;
constexpr auto comm = trace_lane::comm;

}  // namespace

TEST_CASE("trace: JSON has X events in µs from the earliest span and names per rank and lane") {
  trace_recorder trace;
  trace.name_rank(0, "prefill_rank 0");
  trace.add(span(1, comm, 250us, 1500us, "DISPATCH mb0 L3"));
  trace.add(span(0, compute, 100us, 600us, "ATTN-0 mb1 L3"));

  const nlohmann::json doc = nlohmann::json::parse(trace.to_json());
  CHECK(doc.at("displayTimeUnit") == "ms");
  std::vector<nlohmann::json> spans, meta;
  for (const nlohmann::json& e : doc.at("traceEvents"))
    (e.at("ph") == "X" ? spans : meta).push_back(e);

  REQUIRE(spans.size() == 2);
  CHECK(spans[0].at("name") == "ATTN-0 mb1 L3");
  CHECK(spans[0].at("cat") == "decode");
  CHECK(spans[0].at("pid") == 0);
  CHECK(spans[0].at("tid") == 0);
  CHECK(spans[0].at("ts").get<double>() == doctest::Approx(0.0));
  CHECK(spans[0].at("dur").get<double>() == doctest::Approx(500.0));
  CHECK(spans[1].at("pid") == 1);
  CHECK(spans[1].at("tid") == 1);
  CHECK(spans[1].at("ts").get<double>() == doctest::Approx(150.0));
  CHECK(spans[1].at("dur").get<double>() == doctest::Approx(1250.0));

  REQUIRE(meta.size() == 6);  // per rank: process_name, thread_name x2
  auto find_meta = [&](const char* what, int64_t pid, int tid) {
    for (const nlohmann::json& e : meta)
      if (e.at("name") == what && e.at("pid") == pid && e.at("tid") == tid)
        return e.at("args").at("name").get<std::string>();
    return std::string("<missing>");
  };
  CHECK(find_meta("process_name", 0, 0) == "prefill_rank 0");
  CHECK(find_meta("process_name", 1, 0) == "rank 1");
  CHECK(find_meta("thread_name", 1, 0) == "compute");
  CHECK(find_meta("thread_name", 1, 1) == "comm");
}

TEST_CASE("trace: write_json writes the same document to a file") {
  trace_recorder trace;
  trace.add(span(0, compute, 0us, 10us));
  const auto file = std::filesystem::temp_directory_path() / "moe_test_trace_recorder.json";
  trace.write_json(file);
  std::ifstream in(file);
  CHECK(nlohmann::json::parse(in) == nlohmann::json::parse(trace.to_json()));
  std::filesystem::remove(file);
}

TEST_CASE("trace: a disabled recorder records nothing") {
  trace_recorder trace(false);
  CHECK_FALSE(trace.enabled());
  trace.add(span(0, compute, 0us, 10us));
  CHECK(trace.spans().empty());
  const nlohmann::json doc = nlohmann::json::parse(trace.to_json());
  for (const nlohmann::json& e : doc.at("traceEvents"))
    CHECK(e.at("ph") != "X");
}

TEST_CASE("trace: spans() is sorted by begin") {
  trace_recorder trace;
  trace.add(span(0, compute, 30us, 40us, "c"));
  trace.add(span(0, comm, 10us, 20us, "a"));
  trace.add(span(1, compute, 20us, 25us, "b"));
  const std::vector<trace_span> spans = trace.spans();
  REQUIRE(spans.size() == 3);
  CHECK(spans[0].name == "a");
  CHECK(spans[1].name == "b");
  CHECK(spans[2].name == "c");
}

TEST_CASE("trace: summary counts overlapping spans once and intersects the lanes") {
  // compute: [0,40) and [30,60) -> [0,60), plus [80,90); comm: [50,85) and [50,70)
  const std::vector<trace_span> spans = {
    span(0, compute, 0us, 40us),  span(0, compute, 30us, 60us),
    span(0, compute, 80us, 90us), span(0, comm, 50us, 85us),
    span(0, comm, 50us, 70us),    span(1, compute, 0us, 100us)};  // another rank: not counted for rank 0
  const lane_summary s = summarize(spans, 0, t0, t0 + 100us);
  CHECK(s.wall_s == doctest::Approx(100e-6));
  CHECK(s.compute_s == doctest::Approx(70e-6));
  CHECK(s.comm_s == doctest::Approx(35e-6));
  CHECK(s.overlap_s == doctest::Approx(15e-6));  // [50,60) + [80,85)
}

TEST_CASE("trace: spans partially outside the window are clipped") {
  const std::vector<trace_span> spans = {span(0, compute, 0us, 40us), span(0, comm, 30us, 120us),
                                         span(0, compute, 150us, 160us)};
  const lane_summary s = summarize(spans, 0, t0 + 20us, t0 + 100us);
  CHECK(s.wall_s == doctest::Approx(80e-6));
  CHECK(s.compute_s == doctest::Approx(20e-6));  // [20,40)
  CHECK(s.comm_s == doctest::Approx(70e-6));     // [30,100)
  CHECK(s.overlap_s == doctest::Approx(10e-6));  // [30,40)
}

TEST_CASE("trace: summarize_all adds every rank's summary") {
  const std::vector<trace_span> spans = {span(0, compute, 0us, 40us), span(0, comm, 20us, 60us),
                                         span(3, compute, 10us, 30us), span(3, comm, 0us, 100us)};
  const lane_summary s = summarize_all(spans, t0, t0 + 100us);
  CHECK(s.wall_s == doctest::Approx(200e-6));
  CHECK(s.compute_s == doctest::Approx(60e-6));
  CHECK(s.comm_s == doctest::Approx(140e-6));
  CHECK(s.overlap_s == doctest::Approx(40e-6));  // rank 0: [20,40); rank 3: [10,30)
}

TEST_CASE("trace: spans added from several threads are all present") {
  trace_recorder trace;
  constexpr int num_threads = 4, num_per_thread = 500;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < num_threads; ++t)
      threads.emplace_back([&trace, t] {
        for (int i = 0; i < num_per_thread; ++i)
          trace.add(span(t, i % 2 == 0 ? compute : comm, std::chrono::microseconds(i),
                         std::chrono::microseconds(i + 1)));
      });
  }
  const std::vector<trace_span> spans = trace.spans();
  CHECK(spans.size() == size_t{num_threads * num_per_thread});
  for (int t = 0; t < num_threads; ++t)
    CHECK(std::count_if(spans.begin(), spans.end(), [t](const trace_span& s) { return s.rank == t; }) ==
          num_per_thread);
  CHECK(nlohmann::json::parse(trace.to_json()).at("traceEvents").size() ==
        size_t{num_threads * (num_per_thread + 3)});
}

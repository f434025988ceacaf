// actors/trace_recorder.cpp
#include "actors/trace_recorder.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

namespace moe {

namespace {

using time_point = std::chrono::steady_clock::time_point;
using interval = std::pair<time_point, time_point>;

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }
double micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

nlohmann::json metadata(const char* what, int64_t pid, int tid, const std::string& name) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

/// The union of one lane's spans of `rank`, clipped to [from, to): sorted, disjoint intervals.
std::vector<interval> lane_union(const std::vector<trace_span>& spans, int64_t rank, trace_lane lane,
                                 time_point from, time_point to) {
  std::vector<interval> clipped;
  for (const trace_span& s : spans) {
    const time_point b = std::max(s.begin, from), e = std::min(s.end, to);
    if (s.rank == rank && s.lane == lane && b < e)
      clipped.emplace_back(b, e);
  }
  std::sort(clipped.begin(), clipped.end());
  std::vector<interval> merged;
  for (const interval& i : clipped) {
    if (!merged.empty() && i.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, i.second);
    else
      merged.push_back(i);
  }
  return merged;
}

double total_s(const std::vector<interval>& intervals) {
  double sum = 0;
  for (const interval& i : intervals)
    sum += seconds(i.second - i.first);
  return sum;
}

/// Length of the intersection of two sorted, disjoint interval lists.
double intersection_s(const std::vector<interval>& a, const std::vector<interval>& b) {
  double sum = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const time_point lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (lo < hi)
      sum += seconds(hi - lo);
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return sum;
}

}  // namespace

trace_recorder::trace_recorder(bool enabled) : enabled_(enabled) {}

bool trace_recorder::enabled() const noexcept { return enabled_; }

void trace_recorder::name_rank(int64_t rank, std::string name) {
  std::lock_guard lock(mutex_);
  rank_names_[rank] = std::move(name);
}

void trace_recorder::add(trace_span span) {
  if (!enabled_)
    return;
  std::lock_guard lock(mutex_);
  spans_.push_back(std::move(span));
}

std::vector<trace_span> trace_recorder::spans() const {
  std::vector<trace_span> copy;
  {
    std::lock_guard lock(mutex_);
    copy = spans_;
  }
  std::stable_sort(copy.begin(), copy.end(),
                   [](const trace_span& a, const trace_span& b) { return a.begin < b.begin; });
  return copy;
}

std::string trace_recorder::to_json() const {
  const std::vector<trace_span> sorted = spans();
  std::map<int64_t, std::string> names;
  {
    std::lock_guard lock(mutex_);
    names = rank_names_;
  }
  for (const trace_span& s : sorted)
    names.try_emplace(s.rank, "rank " + std::to_string(s.rank));

  nlohmann::json events = nlohmann::json::array();
  for (const auto& [rank, name] : names) {
    events.push_back(metadata("process_name", rank, 0, name));
    events.push_back(metadata("thread_name", rank, 0, "compute"));
    events.push_back(metadata("thread_name", rank, 1, "comm"));
  }
  const time_point origin = sorted.empty() ? time_point{} : sorted.front().begin;
  for (const trace_span& s : sorted)
    events.push_back({{"name", s.name},
                      {"cat", s.category},
                      {"ph", "X"},
                      {"ts", micros(s.begin - origin)},
                      {"dur", micros(s.end - s.begin)},
                      {"pid", s.rank},
                      {"tid", s.lane == trace_lane::compute ? 0 : 1}});
  return nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump();
}

void trace_recorder::write_json(const std::filesystem::path& file) const {
  std::ofstream out(file);
  out << to_json();
  if (!out)
    throw std::runtime_error("trace_recorder: cannot write " + file.string());
}

lane_summary summarize(const std::vector<trace_span>& spans, int64_t rank, time_point from, time_point to) {
  if (to <= from)
    return {};
  const std::vector<interval> compute = lane_union(spans, rank, trace_lane::compute, from, to);
  const std::vector<interval> comm = lane_union(spans, rank, trace_lane::comm, from, to);
  return {.wall_s = seconds(to - from),
          .compute_s = total_s(compute),
          .comm_s = total_s(comm),
          .overlap_s = intersection_s(compute, comm)};
}

lane_summary summarize_all(const std::vector<trace_span>& spans, time_point from, time_point to) {
  std::set<int64_t> ranks;
  for (const trace_span& s : spans)
    ranks.insert(s.rank);
  lane_summary sum;
  for (int64_t rank : ranks) {
    const lane_summary r = summarize(spans, rank, from, to);
    sum.wall_s += r.wall_s;
    sum.compute_s += r.compute_s;
    sum.comm_s += r.comm_s;
    sum.overlap_s += r.overlap_s;
  }
  return sum;
}

}  // namespace moe

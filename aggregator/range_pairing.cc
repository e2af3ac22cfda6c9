#include "aggregator/range_pairing.h"

#include <algorithm>

#include "native/event.h"
#include "native/names.h"
#include "native/steps.h"

namespace rlscope {
namespace {

// A range opened by event `e` on thread `tid` (push or start).
Span SpanOpenedBy(int64_t tid, const wire::Event& e) {
  Span s;
  s.begin_ns = e.ts_ns;
  s.tid = s.end_tid = tid;
  s.name = e.name;
  s.domain = e.domain;
  s.category = e.category;
  return s;
}

}  // namespace

void RangePairing::NoteNames(const wire::Batch& batch) {
  for (const auto& [id, s] : batch.strings) {
    if (s == names::kStep) step_name_id_ = id;
    if (s == names::kCalibration) calibration_name_ = id;
    if (s == names::kStepNumber) step_number_name_ = id;
  }
}

void RangePairing::OnPush(int64_t tid, const wire::Event& e, StepEdges* edges) {
  auto& stack = stacks_[{tid, e.domain}];
  Span s = SpanOpenedBy(tid, e);
  s.payload = e.value;
  s.has_payload = (e.flags & kFlagHasPayload) != 0;
  s.payload_signed = (e.flags & kFlagPayloadSigned) != 0;
  s.depth = static_cast<uint16_t>(std::min<size_t>(stack.size(), UINT16_MAX));
  Open(s, s.has_payload, edges);
  stack.push_back(s);
}

bool RangePairing::OnPop(int64_t tid, const wire::Event& e, bool calibration, StepEdges* edges) {
  auto it = stacks_.find({tid, e.domain});
  if (it == stacks_.end() || it->second.empty()) {
    ++unmatched_;
    return calibration;
  }
  Span s = it->second.back();
  it->second.pop_back();
  if (IsCalibration(s.name)) return true;
  s.end_ns = e.ts_ns;
  Close(s, edges);
  return false;
}

void RangePairing::OnStart(int64_t tid, const wire::Event& e, StepEdges* edges) {
  Span s = SpanOpenedBy(tid, e);
  s.range_id = e.value;
  s.async = true;
  Open(s, false, edges);  // a start's value is its id, not a payload
  if (auto early = early_ends_.find(e.value); early != early_ends_.end()) {
    s.end_ns = early->second.first;
    s.end_tid = early->second.second;
    early_ends_.erase(early);
    Close(s, edges);
  } else {
    open_async_[e.value] = s;
  }
}

bool RangePairing::OnEnd(int64_t tid, const wire::Event& e, bool calibration, StepEdges* edges) {
  auto it = open_async_.find(e.value);
  if (it == open_async_.end()) {
    // The start may still be in flight from another thread's buffer.
    early_ends_[e.value] = {e.ts_ns, tid};
    return calibration;
  }
  Span s = it->second;
  open_async_.erase(it);
  if (IsCalibration(s.name)) return true;
  s.end_ns = e.ts_ns;
  s.end_tid = tid;
  Close(s, edges);
  return false;
}

bool RangePairing::TakeStepNumber(const wire::Event& e) {
  if (step_number_name_ == 0 || e.name != step_number_name_) return false;
  announced_step_ = static_cast<int64_t>(e.value);  // numbers the step range that follows
  return true;
}

void RangePairing::Open(Span& span, bool has_payload, StepEdges* edges) {
  if (edges == nullptr || step_name_id_ == 0 || span.name != step_name_id_) return;
  if (span.begin_ns < steps_done_before_ns_) {  // replayed, written already (ContinueSteps)
    announced_step_ = -1;
    return;
  }
  span.step = announced_step_ >= 0 ? announced_step_ : steps::Number(has_payload, span.payload, next_auto_step_);
  announced_step_ = -1;
  next_auto_step_ = span.step + 1;
  edges->begun.push_back({span.step, span.begin_ns, 0});
}

void RangePairing::Close(Span span, StepEdges* edges) {
  if (span.end_ns < span.begin_ns) span.end_ns = span.begin_ns;
  if (span.step >= 0 && edges != nullptr) edges->closed.push_back({span.step, span.begin_ns, span.end_ns});
  done_->Add(span);
}

void RangePairing::AddOpen(int64_t end_ns, std::vector<Span>* spans) const {
  auto add = [&](Span s) {
    if (s.begin_ns >= end_ns) return;
    s.open = true;
    s.end_ns = end_ns;
    spans->push_back(s);
  };
  for (const auto& [key, stack] : stacks_) {
    for (const Span& s : stack) add(s);
  }
  for (const auto& [id, s] : open_async_) add(s);
}

int64_t RangePairing::EarliestOpenNs() const {
  int64_t open = INT64_MAX;
  for (const auto& [key, stack] : stacks_) {
    if (!stack.empty()) open = std::min(open, stack.front().begin_ns);
  }
  for (const auto& [id, s] : open_async_) open = std::min(open, s.begin_ns);
  return open;
}

void RangePairing::DiscardBefore(int64_t ns) {
  for (auto it = early_ends_.begin(); it != early_ends_.end();) {
    if (it->second.first < ns) {
      ++unmatched_;
      it = early_ends_.erase(it);
    } else {
      ++it;
    }
  }
}

void RangePairing::Bye() {
  unmatched_ += early_ends_.size();
  early_ends_.clear();
}

}  // namespace rlscope

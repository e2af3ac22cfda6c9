// NVTX injection: InitializeInjectionNvtx2 and the handlers it installs.
//
// NVTX calls InitializeInjectionNvtx2 once per shared object that includes the
// NVTX3 headers (the app, libtorch, the Python `nvtx` extension, ...), each
// time with its own function table. Init is therefore idempotent and only
// fills the table it is handed; all state lives in the one Collector.
// Handlers run on the calling thread, synchronously, and must never call NVTX.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <cwchar>
#include <string>

#include "collector/collector.h"

namespace rlscope {
namespace {

std::string Utf8(const wchar_t* w) {
  std::string out;
  if (w == nullptr) return out;
  for (; *w != 0; ++w) {
    const uint32_t c = static_cast<uint32_t>(*w);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

// Domain and registered-string handles are interned string ids (non-null).
uint32_t DomainId(nvtxDomainHandle_t d) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(d)); }

// What an event's attributes say, resolved to ids.
using Attr = RangeAttr;

// Offset just past the `message` field: older or smaller attribute structs
// that end before it carry no message.
constexpr size_t kAttrMessageEnd = offsetof(nvtxEventAttributes_t, message) + sizeof(nvtxMessageValue_t);

// The payload of `a` (its size already checked) into `out`.
RLSCOPE_HOT void ReadPayload(const nvtxEventAttributes_t* a, Attr* out) {
  switch (a->payloadType) {
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64:
      out->value = a->payload.ullValue;
      out->flags |= kFlagHasPayload;
      break;
    case NVTX_PAYLOAD_TYPE_INT64:
      out->value = a->payload.ullValue;
      out->flags |= kFlagHasPayload | kFlagPayloadSigned;
      break;
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32:
      out->value = a->payload.uiValue;
      out->flags |= kFlagHasPayload;
      break;
    case NVTX_PAYLOAD_TYPE_INT32:
      out->value = static_cast<uint64_t>(static_cast<int64_t>(a->payload.iValue));
      out->flags |= kFlagHasPayload | kFlagPayloadSigned;
      break;
    default: break;
  }
}

Attr ReadAttr(Collector* c, ThreadState* ts, const nvtxEventAttributes_t* a) {
  Attr out;
  out.flags = kFlagViaNvtxEx;
  if (a == nullptr || a->size < kAttrMessageEnd) return out;
  out.category = a->category;
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: out.name = ts->names.Lookup(a->message.ascii); break;
    case NVTX_MESSAGE_TYPE_REGISTERED:
      out.name = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(a->message.registered));
      break;
    case NVTX_MESSAGE_TYPE_UNICODE: out.name = c->Intern(Utf8(a->message.unicode)); break;
    default: break;
  }
  ReadPayload(a, &out);
  return out;
}

// ReadAttr for a fast lane: false where it would need more than the name
// cache's inline check (a name not in it, a wide string).
RLSCOPE_HOT bool ReadAttrInline(ThreadState* ts, const nvtxEventAttributes_t* a, Attr* out) {
  out->flags = kFlagViaNvtxEx;
  if (a == nullptr || a->size < kAttrMessageEnd) return true;
  out->category = a->category;
  if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) {
    if (!ts->names.Hit(a->message.ascii, &out->name)) return false;
  } else if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED) {
    out->name = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(a->message.registered));
  } else if (a->messageType == NVTX_MESSAGE_TYPE_UNICODE) {
    return false;
  }
  ReadPayload(a, out);
  return true;
}

// The first lines of every handler: the collector exists and the calling
// thread is tracked (Collector::TrackedThread: registered while armed or
// watching; disarmed, only an existing state is used, so a thread that never
// recorded pays two loads and a branch).
#define RLSCOPE_ENTER(c, ts, ret)       \
  Collector* c = Collector::Instance(); \
  if (c == nullptr) return ret;         \
  ThreadState* ts = c->TrackedThread(); \
  if (ts == nullptr) return ret;        \
  CostSampler rlscope_sampler(c, ts)

// Marks are recorded only while armed: a disarmed one returns before the
// thread is looked up (a first call would register it).
#define RLSCOPE_ENTER_ARMED(c, ts)         \
  Collector* c = Collector::Instance();    \
  if (c == nullptr || !c->armed()) return; \
  ThreadState* ts = c->CurrentThread();    \
  if (ts == nullptr) return;               \
  CostSampler rlscope_sampler(c, ts)

RLSCOPE_HOT int Push(Collector* c, ThreadState* ts, uint32_t domain, const Attr& a) {
  return c->RangePush(ts, a.name, domain, a.category, a.value, a.flags);
}

RLSCOPE_HOT int Pop(Collector* c, ThreadState* ts, uint32_t domain) {
  const int depth = c->RangePop(ts, domain);
  return depth < 0 ? NVTX_NO_PUSH_POP_TRACKING : depth;
}

RLSCOPE_HOT nvtxRangeId_t Start(Collector* c, ThreadState* ts, uint32_t domain, const Attr& a) {
  return c->RangeStart(ts, a.name, domain, a.category, a.value, a.flags);
}

// ---- Fast lanes (Recording's) in front of pushes and pops ----
// A push or pop handler first tries its lane, inline, and takes its full
// path (the *Full function beside it, out of line, behind RLSCOPE_ENTER)
// when the lane says so or the call is the thread's timed one: the full
// path tries the same lane first, inside its CostSampler, so a cost sample
// times what an untimed call runs. A thread with no state while the
// collector neither records nor watches returns at once.
template <typename Lane, typename Full>
RLSCOPE_HOT int Front(Lane lane, Full full) {
  const uint8_t hot = Collector::Hot();
  ThreadState* ts = Recording::Current();
  if (ts == nullptr) {
    // Off, or neither armed nor watching: the full path would not register it.
    const uint8_t mode = hot & (kHotArmedOrWatching | kHotOff);
    if (mode == 0 || (mode & kHotOff) != 0) return NVTX_NO_PUSH_POP_TRACKING;
  } else if (__builtin_expect(--ts->sample_countdown != 0, 1)) {
    // The countdown goes on by one either way: a full path taken after it
    // counts the call again (gaps between timed calls vary anyway).
    int depth;
    if (__builtin_expect(lane(hot, ts, &depth), 1)) return depth;
  } else {
    ts->sample_countdown = 1;  // the timed call: its CostSampler counts to 0
  }
  return full();
}

// Ends come without RLSCOPE_ENTER: the end of a recorded start is recorded
// even on a thread that never recorded anything (EndRangeOnAnyThread).
void End(uint32_t domain, nvtxRangeId_t handle) { EndRangeOnAnyThread(domain, handle); }

// ---- CORE module ----
void NVTX_API MarkEx(const nvtxEventAttributes_t* a) {
  RLSCOPE_ENTER_ARMED(c, ts);
  const Attr at = ReadAttr(c, ts, a);
  c->Record(ts, EventKind::kMark, at.name, 0, at.category, at.value, at.flags);
}
void NVTX_API MarkA(const char* m) {
  RLSCOPE_ENTER_ARMED(c, ts);
  c->Record(ts, EventKind::kMark, ts->names.Lookup(m), 0, 0, 0, kFlagNone);
}
void NVTX_API MarkW(const wchar_t* m) {
  RLSCOPE_ENTER_ARMED(c, ts);
  c->Record(ts, EventKind::kMark, c->Intern(Utf8(m)), 0, 0, 0, kFlagNone);
}
nvtxRangeId_t NVTX_API RangeStartEx(const nvtxEventAttributes_t* a) {
  RLSCOPE_ENTER(c, ts, 0);
  return Start(c, ts, 0, c->start_needs_names(ts) ? ReadAttr(c, ts, a) : Attr{});
}
nvtxRangeId_t NVTX_API RangeStartA(const char* m) {
  RLSCOPE_ENTER(c, ts, 0);
  Attr at;
  if (c->start_needs_names(ts)) at.name = ts->names.Lookup(m);
  return Start(c, ts, 0, at);
}
nvtxRangeId_t NVTX_API RangeStartW(const wchar_t* m) {
  RLSCOPE_ENTER(c, ts, 0);
  Attr at;
  if (c->start_needs_names(ts)) at.name = c->Intern(Utf8(m));
  return Start(c, ts, 0, at);
}
void NVTX_API RangeEnd(nvtxRangeId_t id) { End(0, id); }
// The push entry points' lanes (Recording::FastPush), and their full paths.
RLSCOPE_HOT bool PushExLane(uint8_t hot, ThreadState* ts, uint32_t domain, const nvtxEventAttributes_t* a, int* depth) {
  return Recording::FastPush(
      hot, ts, domain, [ts, a](Attr* at) { return ReadAttrInline(ts, a, at); }, depth);
}
__attribute__((noinline)) int PushExFull(uint32_t domain, const nvtxEventAttributes_t* a) {
  RLSCOPE_ENTER(c, ts, NVTX_NO_PUSH_POP_TRACKING);
  if (int depth; PushExLane(Collector::Hot(), ts, domain, a, &depth)) return depth;
  return Push(c, ts, domain, c->needs_names() ? ReadAttr(c, ts, a) : Attr{});
}
RLSCOPE_HOT bool PushALane(uint8_t hot, ThreadState* ts, const char* m, int* depth) {
  return Recording::FastPush(
      hot, ts, 0, [ts, m](Attr* at) { return ts->names.Hit(m, &at->name); }, depth);
}
__attribute__((noinline)) int PushAFull(const char* m) {
  RLSCOPE_ENTER(c, ts, NVTX_NO_PUSH_POP_TRACKING);
  if (int depth; PushALane(Collector::Hot(), ts, m, &depth)) return depth;
  Attr at;
  if (c->needs_names()) at.name = ts->names.Lookup(m);
  return Push(c, ts, 0, at);
}
// The pops' full path (their lane is Recording::FastPop).
__attribute__((noinline)) int PopFull(uint32_t domain) {
  RLSCOPE_ENTER(c, ts, NVTX_NO_PUSH_POP_TRACKING);
  if (int depth; Recording::FastPop(Collector::Hot(), ts, domain, kFlagNone, &depth)) return depth;
  return Pop(c, ts, domain);
}

int NVTX_API RangePushEx(const nvtxEventAttributes_t* a) {
  return Front([a](uint8_t hot, ThreadState* ts, int* depth) { return PushExLane(hot, ts, 0, a, depth); },
               [a] { return PushExFull(0, a); });
}
int NVTX_API RangePushA(const char* m) {
  return Front([m](uint8_t hot, ThreadState* ts, int* depth) { return PushALane(hot, ts, m, depth); },
               [m] { return PushAFull(m); });
}
int NVTX_API RangePushW(const wchar_t* m) {
  RLSCOPE_ENTER(c, ts, NVTX_NO_PUSH_POP_TRACKING);
  Attr at;
  if (c->needs_names()) at.name = c->Intern(Utf8(m));
  return Push(c, ts, 0, at);
}
int NVTX_API RangePop() {
  return Front(
      [](uint8_t hot, ThreadState* ts, int* depth) { return Recording::FastPop(hot, ts, 0, kFlagNone, depth); },
      [] { return PopFull(0); });
}
void NVTX_API NameCategoryA(uint32_t category, const char* name) {
  if (Collector* c = Collector::Instance(); c != nullptr && name != nullptr) {
    c->NameCategory(0, category, name);
  }
}
void NVTX_API NameCategoryW(uint32_t category, const wchar_t* name) {
  if (Collector* c = Collector::Instance()) c->NameCategory(0, category, Utf8(name));
}
void NVTX_API NameOsThreadA(uint32_t tid, const char* name) {
  if (Collector* c = Collector::Instance(); c != nullptr && name != nullptr) c->NameThread(tid, name);
}
void NVTX_API NameOsThreadW(uint32_t tid, const wchar_t* name) {
  if (Collector* c = Collector::Instance()) c->NameThread(tid, Utf8(name));
}

// ---- CORE2 module (domains; NULL domain = the default domain) ----
void NVTX_API DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  RLSCOPE_ENTER_ARMED(c, ts);
  const Attr at = ReadAttr(c, ts, a);
  c->Record(ts, EventKind::kMark, at.name, DomainId(d), at.category, at.value, at.flags);
}
nvtxRangeId_t NVTX_API DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  RLSCOPE_ENTER(c, ts, 0);
  return Start(c, ts, DomainId(d), c->start_needs_names(ts) ? ReadAttr(c, ts, a) : Attr{});
}
void NVTX_API DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id) { End(DomainId(d), id); }
int NVTX_API DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  const uint32_t domain = DomainId(d);
  return Front([domain, a](uint8_t hot, ThreadState* ts, int* depth) { return PushExLane(hot, ts, domain, a, depth); },
               [domain, a] { return PushExFull(domain, a); });
}
int NVTX_API DomainRangePop(nvtxDomainHandle_t d) {
  const uint32_t domain = DomainId(d);
  return Front([domain](uint8_t hot, ThreadState* ts,
                        int* depth) { return Recording::FastPop(hot, ts, domain, kFlagNone, depth); },
               [domain] { return PopFull(domain); });
}
nvtxResourceHandle_t NVTX_API DomainResourceCreate(nvtxDomainHandle_t, nvtxResourceAttributes_t*) { return nullptr; }
void NVTX_API DomainResourceDestroy(nvtxResourceHandle_t) {}
void NVTX_API DomainNameCategoryA(nvtxDomainHandle_t d, uint32_t category, const char* name) {
  if (Collector* c = Collector::Instance(); c != nullptr && name != nullptr) {
    c->NameCategory(DomainId(d), category, name);
  }
}
void NVTX_API DomainNameCategoryW(nvtxDomainHandle_t d, uint32_t category, const wchar_t* name) {
  if (Collector* c = Collector::Instance()) c->NameCategory(DomainId(d), category, Utf8(name));
}
nvtxStringHandle_t NVTX_API DomainRegisterStringA(nvtxDomainHandle_t, const char* s) {
  Collector* c = Collector::Instance();
  if (c == nullptr || s == nullptr) return nullptr;
  return reinterpret_cast<nvtxStringHandle_t>(static_cast<uintptr_t>(c->Intern(s)));
}
nvtxStringHandle_t NVTX_API DomainRegisterStringW(nvtxDomainHandle_t, const wchar_t* s) {
  Collector* c = Collector::Instance();
  if (c == nullptr || s == nullptr) return nullptr;
  return reinterpret_cast<nvtxStringHandle_t>(static_cast<uintptr_t>(c->Intern(Utf8(s))));
}
nvtxDomainHandle_t NVTX_API DomainCreateA(const char* name) {
  Collector* c = Collector::Instance();
  if (c == nullptr || name == nullptr) return nullptr;
  return reinterpret_cast<nvtxDomainHandle_t>(static_cast<uintptr_t>(c->Intern(name)));
}
nvtxDomainHandle_t NVTX_API DomainCreateW(const wchar_t* name) {
  Collector* c = Collector::Instance();
  if (c == nullptr || name == nullptr) return nullptr;
  return reinterpret_cast<nvtxDomainHandle_t>(static_cast<uintptr_t>(c->Intern(Utf8(name))));
}
void NVTX_API DomainDestroy(nvtxDomainHandle_t) {}
void NVTX_API Initialize(const void*) {}

static_assert(std::is_same_v<decltype(&RangePushA), nvtxRangePushA_impl_fntype>);
static_assert(std::is_same_v<decltype(&DomainRangePushEx), nvtxDomainRangePushEx_impl_fntype>);
static_assert(std::is_same_v<decltype(&DomainRegisterStringA), nvtxDomainRegisterStringA_impl_fntype>);
static_assert(std::is_same_v<decltype(&DomainCreateA), nvtxDomainCreateA_impl_fntype>);
static_assert(std::is_same_v<decltype(&RangeStartEx), nvtxRangeStartEx_impl_fntype>);

template <typename Fn>
void Set(NvtxFunctionTable table, unsigned size, unsigned cbid, Fn fn) {
  if (cbid < size && table[cbid] != nullptr) {
    *table[cbid] = reinterpret_cast<NvtxFunctionPointer>(fn);
  }
}

int FillTables(NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
  NvtxFunctionTable t = nullptr;
  unsigned n = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &n) == 0 || t == nullptr) return 0;
  Set(t, n, NVTX_CBID_CORE_MarkEx, &MarkEx);
  Set(t, n, NVTX_CBID_CORE_MarkA, &MarkA);
  Set(t, n, NVTX_CBID_CORE_MarkW, &MarkW);
  Set(t, n, NVTX_CBID_CORE_RangeStartEx, &RangeStartEx);
  Set(t, n, NVTX_CBID_CORE_RangeStartA, &RangeStartA);
  Set(t, n, NVTX_CBID_CORE_RangeStartW, &RangeStartW);
  Set(t, n, NVTX_CBID_CORE_RangeEnd, &RangeEnd);
  Set(t, n, NVTX_CBID_CORE_RangePushEx, &RangePushEx);
  Set(t, n, NVTX_CBID_CORE_RangePushA, &RangePushA);
  Set(t, n, NVTX_CBID_CORE_RangePushW, &RangePushW);
  Set(t, n, NVTX_CBID_CORE_RangePop, &RangePop);
  Set(t, n, NVTX_CBID_CORE_NameCategoryA, &NameCategoryA);
  Set(t, n, NVTX_CBID_CORE_NameCategoryW, &NameCategoryW);
  Set(t, n, NVTX_CBID_CORE_NameOsThreadA, &NameOsThreadA);
  Set(t, n, NVTX_CBID_CORE_NameOsThreadW, &NameOsThreadW);
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n) == 0 || t == nullptr) return 0;
  Set(t, n, NVTX_CBID_CORE2_DomainMarkEx, &DomainMarkEx);
  Set(t, n, NVTX_CBID_CORE2_DomainRangeStartEx, &DomainRangeStartEx);
  Set(t, n, NVTX_CBID_CORE2_DomainRangeEnd, &DomainRangeEnd);
  Set(t, n, NVTX_CBID_CORE2_DomainRangePushEx, &DomainRangePushEx);
  Set(t, n, NVTX_CBID_CORE2_DomainRangePop, &DomainRangePop);
  Set(t, n, NVTX_CBID_CORE2_DomainResourceCreate, &DomainResourceCreate);
  Set(t, n, NVTX_CBID_CORE2_DomainResourceDestroy, &DomainResourceDestroy);
  Set(t, n, NVTX_CBID_CORE2_DomainNameCategoryA, &DomainNameCategoryA);
  Set(t, n, NVTX_CBID_CORE2_DomainNameCategoryW, &DomainNameCategoryW);
  Set(t, n, NVTX_CBID_CORE2_DomainRegisterStringA, &DomainRegisterStringA);
  Set(t, n, NVTX_CBID_CORE2_DomainRegisterStringW, &DomainRegisterStringW);
  Set(t, n, NVTX_CBID_CORE2_DomainCreateA, &DomainCreateA);
  Set(t, n, NVTX_CBID_CORE2_DomainCreateW, &DomainCreateW);
  Set(t, n, NVTX_CBID_CORE2_DomainDestroy, &DomainDestroy);
  Set(t, n, NVTX_CBID_CORE2_Initialize, &Initialize);
  return 1;
}

}  // namespace
}  // namespace rlscope

// Called by NVTX on the first NVTX call of each shared object, when
// NVTX_INJECTION64_PATH names this library. Returns 1 when our handlers are
// installed; 0 (NVTX then turns every call into a no-op) when profiling is
// off in this process or anything fails.
extern "C" __attribute__((visibility("default"))) int NVTX_API
InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  try {
    rlscope::Collector* c = rlscope::Collector::Start();
    if (get_export_table == nullptr || c == nullptr || !c->config().cpu.nvtx) return 0;
    return rlscope::FillTables(get_export_table);
  } catch (...) {
    return 0;
  }
}

// A driver for wire_fuzz.cc without libFuzzer: seeds are valid frames of
// every message type (wire::Encode), each mutated at random (bytes flipped,
// inserted, deleted, truncated, spliced with another seed) and handed to
// LLVMFuzzerTestOneInput. Deterministic for a given seed.
//
//   wire_fuzz_standalone [ITERATIONS] [SEED]     (default 20000, 1)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "native/event.h"
#include "native/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::string> Seeds() {
  using namespace rlscope::wire;
  Hello h;
  h.session = 7;
  h.identity = {"host", 12, 0, "controller", "train.py", {{"actor_id", "abc"}}};
  h.clock = "monotonic";
  h.costs = {{"push", 40.0}};
  h.config = "steps: all\n";
  h.secret = "0123456789abcdef";
  h.clock_domain = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0:4026531834";
  Batch b;
  b.session = 7;
  b.seq = 3;
  b.watermark_ns = 123456789;
  b.strings = {{1, "step"}, {2, "gen"}};
  b.thread_names = {{100, "main"}};
  b.categories = {{0, 1, "compute"}};
  b.probes = {{1, 2, 3, 4}};
  ThreadEvents t;
  t.tid = 100;
  for (int i = 0; i < 4; ++i) {
    Event e;
    e.ts_ns = 1000 + i;
    e.kind = static_cast<uint8_t>(i % 2 == 0 ? rlscope::EventKind::kRangePush : rlscope::EventKind::kRangePop);
    e.name = i % 2 == 0 ? 1 + i / 2 : 0;
    t.events.push_back(e);
  }
  b.threads = {t};
  rlscope::GpuRecord g{};
  g.start_ns = 10;
  g.end_ns = 20;
  b.gpu = {g};
  Control c;
  c.window = Control::Window::kOpen;
  c.flush = 9;
  c.run_config = "steps: [2]\n";
  c.role = "worker";
  c.hello = true;
  c.release_ns = 55;
  c.probe = true;
  c.probe_port = 40001;
  c.probe_host = "10.0.0.7";
  c.probe_key = 0x1234567890abcdefull;
  return {Encode(h), Encode(b),           Encode(Bye{7, 10, 1}), Encode(Expected{7, {{{"pid", "1"}}}}),
          Encode(c), Encode(Probe{7, 99})};
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 20000;
  std::mt19937_64 rng(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1);
  const std::vector<std::string> seeds = Seeds();
  for (const std::string& s : seeds) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  long taken = 0;
  for (long i = 0; i < iterations; ++i) {
    std::string f = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < edits && !f.empty(); ++k) {
      const size_t at = rng() % f.size();
      switch (rng() % 6) {
        case 0: f[at] = static_cast<char>(rng()); break;               // a byte
        case 1: f[at] ^= static_cast<char>(1u << (rng() % 8)); break;  // a bit
        case 2: f.insert(at, 1, static_cast<char>(rng())); break;      // insert
        case 3: f.erase(at, 1 + rng() % 4); break;                     // delete
        case 4: f.resize(at); break;                                   // truncate
        case 5: {                                                      // splice
          const std::string& o = seeds[rng() % seeds.size()];
          f = f.substr(0, at) + o.substr(rng() % o.size());
          break;
        }
      }
    }
    const rlscope::wire::DecodeResult r = rlscope::wire::Decode(f.data(), f.size());
    taken += r.ok ? 1 : 0;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(f.data()), f.size());
  }
  std::printf("wire_fuzz: %ld mutated frames, %ld decoded, the rest refused with a reason; no crash\n", iterations,
              taken);
  return 0;
}

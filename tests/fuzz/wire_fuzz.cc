// Fuzz target: the frame decoder (native/wire.cc), which reads whatever
// reaches the aggregator's port. Contract under test: Decode never crashes,
// hangs, reads out of bounds or throws, whatever the bytes; a frame it takes
// encodes again into one it decodes to the same message.
//
// Built two ways: with libFuzzer (`make fuzz`: clang -fsanitize=fuzzer,
// address,undefined, minutes of coverage-guided search), and with
// standalone_main.cc under ASan/UBSan as a ctest (`make test`: a bounded
// number of seeded random mutations).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "native/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const rlscope::wire::DecodeResult r = rlscope::wire::Decode(reinterpret_cast<const char*>(data), size);
  if (!r.ok) {
    if (r.error.empty()) std::abort();  // a refusal always says why
    return 0;
  }
  // What was taken survives a round trip (the Batch writer re-encodes it).
  const std::string again = rlscope::wire::Encode(r.message);
  const rlscope::wire::DecodeResult r2 = rlscope::wire::Decode(again.data(), again.size());
  if (!r2.ok || r2.message.index() != r.message.index()) {
    std::fprintf(stderr, "round trip failed: %s\n", r2.error.c_str());
    std::abort();
  }
  return 0;
}

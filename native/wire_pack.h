// Internal to the wire code: what the message encoders (wire_encode.cc) and
// the streaming batch encoder (wire_batch_writer.cc) share. Not API; include
// native/wire.h instead.
//
// A message body is a msgpack map whose size is never counted by hand: the
// frame header is written with the size left open (OpenBody), every body key
// is written through PackKey, which counts it, and CloseBody stores that
// count. The size thus always equals the keys written, optional ones included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <msgpack.hpp>

#include "native/wire.h"

namespace rlscope::wire::internal {

using Packer = msgpack::packer<msgpack::sbuffer>;

// Writes the frame up to the body: [magic, version, type, and the body map's
// header with its size left open]. `pk` must write to `buf`. Returns where
// the header is in `buf`, for CloseBody.
size_t OpenBody(Packer& pk, msgpack::sbuffer& buf, MessageType type);

// Writes one body key and counts it in `*keys`; returns `pk` for the value.
Packer& PackKey(Packer& pk, std::string_view key, uint32_t* keys);

// Stores `keys` as the size of the body map opened at `at`, byte for byte the
// header msgpack-c's pack_map(keys) writes (one byte up to 15 keys; beyond,
// what follows moves up to make room). Call once per OpenBody, after the
// body's last key and value.
void CloseBody(msgpack::sbuffer& buf, size_t at, uint32_t keys);

// A msgpack str.
void PackString(Packer& pk, const std::string& s);

// A msgpack map of str to str, in the map's order.
void PackStringMap(Packer& pk, const std::map<std::string, std::string>& m);

}  // namespace rlscope::wire::internal

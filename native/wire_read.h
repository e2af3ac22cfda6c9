// Internal to the wire decoder (wire_decode.cc, wire_decode_batch.cc): typed
// reads of msgpack objects that, on a mismatch, return false with an error
// saying what was wrong and where in the frame. Not API; include native/wire.h
// instead.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <msgpack.hpp>

#include "native/wire.h"

namespace rlscope::wire::internal {

// Where a decoding error goes: Fail stores "where: what" and returns false,
// so a read can `return c.Fail(...)`.
struct Ctx {
  std::string* err;
  bool Fail(const std::string& where, const std::string& what) {
    *err = where + ": " + what;
    return false;
  }
};

// The msgpack type of `o` as errors name it ("uint", "str", "map", ...).
const char* TypeName(const msgpack::object& o);

// Each reads `o` into *out if it has the type named; else it fails, naming
// `where`. On failure *out is as it was, except after GetUintAtMost (the
// value out of range) and GetStrMap (the entries before the bad one).
bool GetInt(Ctx& c, const msgpack::object& o, const std::string& where, int64_t* out);
bool GetUint(Ctx& c, const msgpack::object& o, const std::string& where, uint64_t* out);
// An unsigned integer that must fit the field it lands in (ids are 32-bit,
// flags 8-bit): a larger value is an error, never silently truncated.
bool GetUintAtMost(Ctx& c, const msgpack::object& o, const std::string& where, uint64_t max, uint64_t* out);
bool GetStr(Ctx& c, const msgpack::object& o, const std::string& where, std::string* out);
bool GetBool(Ctx& c, const msgpack::object& o, const std::string& where, bool* out);
bool GetArray(Ctx& c, const msgpack::object& o, const std::string& where, const msgpack::object_array** out);
// The entries of map `m` (the caller has checked it is a map), each a str
// to str, into *out (a repeated key: the last wins); errors name
// "`where` key" or "`where`[key]".
bool GetStrMap(Ctx& c, const msgpack::object& m, const std::string& where, std::map<std::string, std::string>* out);

// Looks `key` up in a map object; nullptr when absent.
const msgpack::object* Find(const msgpack::object& map, std::string_view key);
// As Find, failing "`where`: missing key '`key`'" when absent.
bool Require(Ctx& c, const msgpack::object& map, const std::string& where, std::string_view key,
             const msgpack::object** out);

// Walks array `o` (named `name` in errors), whose elements are arrays of
// `n` items (`shape` says which), handing each one's items to `each`.
template <typename F>
bool ForEachTuple(Ctx& c, const msgpack::object& o, const std::string& name, uint32_t n, const char* shape, F each) {
  const msgpack::object_array* arr;
  if (!GetArray(c, o, name, &arr)) return false;
  for (uint32_t i = 0; i < arr->size; ++i) {
    const std::string where = name + "[" + std::to_string(i) + "]";
    const msgpack::object_array* tuple;
    if (!GetArray(c, arr->ptr[i], where, &tuple)) return false;
    if (tuple->size != n) return c.Fail(where, shape);
    if (!each(tuple->ptr, where)) return false;
  }
  return true;
}

// A batch's body (wire_decode_batch.cc), for Decode (wire_decode.cc).
bool DecodeBatch(Ctx& c, const msgpack::object& body, Batch* b);

}  // namespace rlscope::wire::internal

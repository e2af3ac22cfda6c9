// Typed reads for the wire decoder; their contracts are in wire_read.h.
#include "native/wire_read.h"

namespace rlscope::wire::internal {

using msgpack::object;
using msgpack::object_array;
using msgpack::type::object_type;

const char* TypeName(const object& o) {
  switch (o.type) {
    case object_type::NIL: return "nil";
    case object_type::BOOLEAN: return "bool";
    case object_type::POSITIVE_INTEGER: return "uint";
    case object_type::NEGATIVE_INTEGER: return "int";
    case object_type::FLOAT32:
    case object_type::FLOAT64: return "float";
    case object_type::STR: return "str";
    case object_type::BIN: return "bin";
    case object_type::ARRAY: return "array";
    case object_type::MAP: return "map";
    default: return "ext";
  }
}

bool GetInt(Ctx& c, const object& o, const std::string& where, int64_t* out) {
  if (o.type == object_type::POSITIVE_INTEGER) {
    *out = static_cast<int64_t>(o.via.u64);
    return true;
  }
  if (o.type == object_type::NEGATIVE_INTEGER) {
    *out = o.via.i64;
    return true;
  }
  return c.Fail(where, std::string("expected an integer, got ") + TypeName(o));
}

bool GetUint(Ctx& c, const object& o, const std::string& where, uint64_t* out) {
  if (o.type != object_type::POSITIVE_INTEGER) {
    return c.Fail(where, std::string("expected an unsigned integer, got ") + TypeName(o));
  }
  *out = o.via.u64;
  return true;
}

bool GetUintAtMost(Ctx& c, const object& o, const std::string& where, uint64_t max, uint64_t* out) {
  if (!GetUint(c, o, where, out)) return false;
  if (*out > max) {
    return c.Fail(where, std::to_string(*out) + " is out of range (max " + std::to_string(max) + ")");
  }
  return true;
}

bool GetStr(Ctx& c, const object& o, const std::string& where, std::string* out) {
  if (o.type != object_type::STR) {
    return c.Fail(where, std::string("expected a string, got ") + TypeName(o));
  }
  out->assign(o.via.str.ptr, o.via.str.size);
  return true;
}

bool GetBool(Ctx& c, const object& o, const std::string& where, bool* out) {
  if (o.type != object_type::BOOLEAN) return c.Fail(where, std::string("expected a bool, got ") + TypeName(o));
  *out = o.via.boolean;
  return true;
}

bool GetArray(Ctx& c, const object& o, const std::string& where, const object_array** out) {
  if (o.type != object_type::ARRAY) {
    return c.Fail(where, std::string("expected an array, got ") + TypeName(o));
  }
  *out = &o.via.array;
  return true;
}

const object* Find(const object& map, std::string_view key) {
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type == object_type::STR && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key) {
      return &kv.val;
    }
  }
  return nullptr;
}

bool Require(Ctx& c, const object& map, const std::string& where, std::string_view key, const object** out) {
  *out = Find(map, key);
  if (*out == nullptr) return c.Fail(where, "missing key '" + std::string(key) + "'");
  return true;
}

bool GetStrMap(Ctx& c, const object& m, const std::string& where, std::map<std::string, std::string>* out) {
  for (uint32_t i = 0; i < m.via.map.size; ++i) {
    std::string k, v;
    if (!GetStr(c, m.via.map.ptr[i].key, where + " key", &k) ||
        !GetStr(c, m.via.map.ptr[i].val, where + "[" + k + "]", &v)) {
      return false;
    }
    (*out)[k] = v;
  }
  return true;
}

}  // namespace rlscope::wire::internal

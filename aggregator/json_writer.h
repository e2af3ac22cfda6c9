// A minimal streaming JSON writer (no DOM): enough for trace.json and the
// summaries, fast enough for millions of events. Not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace rlscope {

class JsonWriter {
 public:
  explicit JsonWriter(std::string* out) : out_(out) {}

  JsonWriter& BeginObject() { Sep(); out_->push_back('{'); first_ = true; return *this; }
  JsonWriter& EndObject() { out_->push_back('}'); first_ = false; return *this; }
  JsonWriter& BeginArray() { Sep(); out_->push_back('['); first_ = true; return *this; }
  JsonWriter& EndArray() { out_->push_back(']'); first_ = false; return *this; }
  JsonWriter& Key(std::string_view k) {
    Sep();
    Quote(k);
    out_->push_back(':');
    first_ = true;  // the value follows without a comma
    return *this;
  }
  JsonWriter& String(std::string_view s) { Sep(); Quote(s); return *this; }
  JsonWriter& Int(int64_t v) { Sep(); out_->append(std::to_string(v)); return *this; }
  JsonWriter& Uint(uint64_t v) { Sep(); out_->append(std::to_string(v)); return *this; }
  JsonWriter& Bool(bool v) { Sep(); out_->append(v ? "true" : "false"); return *this; }
  JsonWriter& Null() { Sep(); out_->append("null"); return *this; }
  JsonWriter& Double(double v) {
    Sep();
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    out_->append(buf);
    return *this;
  }
  // Nanoseconds as microseconds with exactly three decimals ("12.345"), the
  // Chrome trace convention; exact for any int64 ns value.
  JsonWriter& Micros(int64_t ns) {
    Sep();
    if (ns < 0) {
      out_->push_back('-');
      ns = -ns;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%lld.%03lld", static_cast<long long>(ns / 1000),
                  static_cast<long long>(ns % 1000));
    out_->append(buf);
    return *this;
  }
  // Starts a new line between top-level items (readable, diff-friendly).
  JsonWriter& Newline() { out_->push_back('\n'); return *this; }

 private:
  void Sep() {
    if (!first_) out_->push_back(',');
    first_ = false;
  }
  void Quote(std::string_view s) {
    out_->push_back('"');
    for (unsigned char c : s) {
      switch (c) {
        case '"': out_->append("\\\""); break;
        case '\\': out_->append("\\\\"); break;
        case '\n': out_->append("\\n"); break;
        case '\r': out_->append("\\r"); break;
        case '\t': out_->append("\\t"); break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out_->append(buf);
          } else {
            out_->push_back(static_cast<char>(c));
          }
      }
    }
    out_->push_back('"');
  }

  std::string* out_;
  bool first_ = true;
};

}  // namespace rlscope

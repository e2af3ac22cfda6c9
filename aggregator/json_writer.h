// A minimal streaming JSON writer (no DOM): enough for trace.json and the
// summaries, fast enough for millions of events. Not thread-safe.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
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
    // Keys are short identifiers: ,"key": in one append when nothing needs escaping.
    char buf[64];
    if (k.size() <= sizeof(buf) - 4 && !NeedsEscape(k)) {
      size_t n = 0;
      if (!first_) buf[n++] = ',';
      buf[n++] = '"';
      std::memcpy(buf + n, k.data(), k.size());
      n += k.size();
      buf[n++] = '"';
      buf[n++] = ':';
      out_->append(buf, n);
    } else {
      Sep();
      Quote(k);
      out_->push_back(':');
    }
    first_ = true;  // the value follows without a comma
    return *this;
  }
  JsonWriter& String(std::string_view s) { Sep(); Quote(s); return *this; }
  JsonWriter& Int(int64_t v) { Sep(); AppendNumber(v); return *this; }
  JsonWriter& Uint(uint64_t v) { Sep(); AppendNumber(v); return *this; }
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
    // The magnitude as unsigned: -INT64_MIN does not fit an int64.
    const uint64_t mag = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
    if (ns < 0) out_->push_back('-');
    AppendNumber(mag / 1000);
    const int frac = static_cast<int>(mag % 1000);
    const char digits[4] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                            static_cast<char>('0' + frac % 10)};
    out_->append(digits, 4);
    return *this;
  }
  // Starts a new line between top-level items (readable, diff-friendly).
  JsonWriter& Newline() { out_->push_back('\n'); return *this; }

 private:
  void Sep() {
    if (!first_) out_->push_back(',');
    first_ = false;
  }
  // Integers without a temporary string (std::to_chars: no locale, no allocation).
  template <typename T>
  void AppendNumber(T v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);
    out_->append(buf, static_cast<size_t>(r.ptr - buf));
  }
  static bool NeedsEscape(std::string_view s) {
    for (const char ch : s) {
      const unsigned char c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c == '"' || c == '\\') return true;
    }
    return false;
  }
  void Quote(std::string_view s) {
    out_->push_back('"');
    // Names rarely need escaping: copy the runs between escapes whole.
    size_t run = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c != '"' && c != '\\') continue;
      out_->append(s.data() + run, i - run);
      run = i + 1;
      switch (c) {
        case '"': out_->append("\\\""); break;
        case '\\': out_->append("\\\\"); break;
        case '\n': out_->append("\\n"); break;
        case '\r': out_->append("\\r"); break;
        case '\t': out_->append("\\t"); break;
        default: {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out_->append(buf);
        }
      }
    }
    out_->append(s.data() + run, s.size() - run);
    out_->push_back('"');
  }

  std::string* out_;
  bool first_ = true;
};

}  // namespace rlscope

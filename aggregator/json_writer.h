// A minimal streaming JSON writer (no DOM): enough for trace.json and the
// summaries, fast enough for millions of events. Not thread-safe.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace rlscope {

// Where a trace's JSON goes while it is encoded: appends inline (a
// std::string's are calls), emptied by its reader as it goes.
class JsonBuffer {
 public:
  JsonBuffer() = default;
  // A moved-from buffer is empty, with no memory.
  JsonBuffer(JsonBuffer&& o) noexcept
      : data_(std::move(o.data_)), size_(std::exchange(o.size_, 0)), cap_(std::exchange(o.cap_, 0)) {}
  JsonBuffer& operator=(JsonBuffer&& o) noexcept {
    data_ = std::move(o.data_);
    size_ = std::exchange(o.size_, 0);
    cap_ = std::exchange(o.cap_, 0);
    return *this;
  }
  void append(const char* p, size_t n) {
    if (n == 0) return;  // (no memcpy from or into a null buffer)
    if (n > cap_ - size_) Grow(n);
    std::memcpy(data_.get() + size_, p, n);
    size_ += n;
  }
  void append(const char* s) { append(s, std::strlen(s)); }
  void push_back(char c) {
    if (size_ == cap_) Grow(1);
    data_[size_++] = c;
  }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_.get(), size_}; }
  void clear() { size_ = 0; }

 private:
  void Grow(size_t n) {
    const size_t cap = std::max(cap_ * 2, std::max<size_t>(size_ + n, 4096));
    std::unique_ptr<char[]> data(new char[cap]);
    if (size_ > 0) std::memcpy(data.get(), data_.get(), size_);
    data_ = std::move(data);
    cap_ = cap;
  }
  std::unique_ptr<char[]> data_;
  size_t size_ = 0, cap_ = 0;
};

// `Out`: std::string (JsonWriter) or JsonBuffer; anything with
// append(const char*, size_t), append(const char*) and push_back(char).
template <class Out>
class BasicJsonWriter {
 public:
  // `in_list`: the output continues a list or object that holds something
  // already (the first value written takes a comma).
  explicit BasicJsonWriter(Out* out, bool in_list = false) : out_(out), first_(!in_list) {}

  BasicJsonWriter& BeginObject() {
    Sep();
    out_->push_back('{');
    first_ = true;
    return *this;
  }
  BasicJsonWriter& EndObject() {
    out_->push_back('}');
    first_ = false;
    return *this;
  }
  BasicJsonWriter& BeginArray() {
    Sep();
    out_->push_back('[');
    first_ = true;
    return *this;
  }
  BasicJsonWriter& EndArray() {
    out_->push_back(']');
    first_ = false;
    return *this;
  }
  // `v`, or null when it is negative (not known: a rank, a bound).
  BasicJsonWriter& IntOrNull(int64_t v) { return v >= 0 ? Int(v) : Null(); }
  // `v` when `known`, else null.
  BasicJsonWriter& DoubleOrNull(bool known, double v) { return known ? Double(v) : Null(); }
  BasicJsonWriter& Key(std::string_view k) {
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
  // Appends `text` as it is: JSON the caller vouches for that ends where a
  // value follows without a comma (a key's colon, an opening bracket), such
  // as `"ph":"X","name":`. A fast path for fixed keys.
  BasicJsonWriter& Fixed(std::string_view text) {
    out_->append(text.data(), text.size());
    first_ = true;
    return *this;
  }
  BasicJsonWriter& String(std::string_view s) {
    Sep();
    Quote(s);
    return *this;
  }
  BasicJsonWriter& Int(int64_t v) {
    Sep();
    AppendNumber(v);
    return *this;
  }
  BasicJsonWriter& Uint(uint64_t v) {
    Sep();
    AppendNumber(v);
    return *this;
  }
  BasicJsonWriter& Bool(bool v) {
    Sep();
    out_->append(v ? "true" : "false");
    return *this;
  }
  BasicJsonWriter& Null() {
    Sep();
    out_->append("null");
    return *this;
  }
  // A value already formatted as a JSON number.
  BasicJsonWriter& Number(std::string_view text) {
    Sep();
    out_->append(text.data(), text.size());
    return *this;
  }
  BasicJsonWriter& Double(double v) {
    Sep();
    char buf[32];  // as printf's "%.6g", without its locale and varargs
    const auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general, 6);
    out_->append(buf, static_cast<size_t>(r.ptr - buf));
    return *this;
  }
  // Nanoseconds as microseconds with exactly three decimals ("12.345"), the
  // Chrome trace convention; exact for any int64 ns value.
  BasicJsonWriter& Micros(int64_t ns) {
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
  BasicJsonWriter& Newline() {
    out_->push_back('\n');
    return *this;
  }

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

  Out* out_;
  bool first_;
};

using JsonWriter = BasicJsonWriter<std::string>;

}  // namespace rlscope

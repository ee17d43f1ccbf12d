#pragma once

// A small binary codec for metadata records: little-endian fixed-width integers and length-prefixed strings.
// The decoder never reads past its input and reports truncation instead of asserting, because it reads
// bytes from disk that may be torn or corrupt.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fjord::store {

class encoder {
public:
    explicit encoder(std::string& out) : _out(out) {}
    void u8(std::uint8_t v) { _out.push_back(static_cast<char>(v)); }
    void u32(std::uint32_t v) { _out.append(reinterpret_cast<const char*>(&v), 4); }
    void u64(std::uint64_t v) { _out.append(reinterpret_cast<const char*>(&v), 8); }
    void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
    void str(std::string_view s) {
        u32(static_cast<std::uint32_t>(s.size()));
        _out.append(s);
    }

private:
    std::string& _out;
};

class decoder {
public:
    explicit decoder(std::string_view in) : _in(in) {}
    bool ok() const { return _ok; }
    bool at_end() const { return _pos == _in.size(); }
    std::uint8_t u8() {
        std::uint8_t v = 0;
        raw(&v, 1);
        return v;
    }
    std::uint32_t u32() {
        std::uint32_t v = 0;
        raw(&v, 4);
        return v;
    }
    std::uint64_t u64() {
        std::uint64_t v = 0;
        raw(&v, 8);
        return v;
    }
    std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
    std::string str() {
        std::uint32_t n = u32();
        if (!_ok || n > _in.size() - _pos) {
            _ok = false;
            return {};
        }
        std::string s(_in.substr(_pos, n));
        _pos += n;
        return s;
    }

private:
    void raw(void* out, std::size_t n) {
        if (!_ok || n > _in.size() - _pos) {
            _ok = false;
            return;
        }
        std::memcpy(out, _in.data() + _pos, n);
        _pos += n;
    }
    std::string_view _in;
    std::size_t _pos = 0;
    bool _ok = true;
};

}  // namespace fjord::store

#include "base/encoding.h"

#include <openssl/evp.h>

#include <limits>

namespace fjord::base {

namespace {
constexpr char hex_lower[] = "0123456789abcdef";
constexpr char hex_upper[] = "0123456789ABCDEF";

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool is_unreserved(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}
}  // namespace

std::string hex_encode(std::string_view raw) {
    std::string out;
    out.reserve(raw.size() * 2);
    for (unsigned char c : raw) {
        out.push_back(hex_lower[c >> 4]);
        out.push_back(hex_lower[c & 15]);
    }
    return out;
}

std::optional<std::string> hex_decode(std::string_view hex) {
    if (hex.size() % 2) return std::nullopt;
    std::string out;
    out.reserve(hex.size() / 2);
    for (size_t i = 0; i < hex.size(); i += 2) {
        int hi = hex_value(hex[i]), lo = hex_value(hex[i + 1]);
        if (hi < 0 || lo < 0) return std::nullopt;
        out.push_back(static_cast<char>(hi << 4 | lo));
    }
    return out;
}

std::string base64_encode(std::string_view raw) {
    std::string out(4 * ((raw.size() + 2) / 3), '\0');
    int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(raw.data()),
                            static_cast<int>(raw.size()));
    out.resize(static_cast<size_t>(n));
    return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
    text = trim(text);
    if (text.size() % 4) return std::nullopt;
    for (char c : text)
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '/' || c == '='))
            return std::nullopt;
    std::string out(3 * text.size() / 4, '\0');
    int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(text.data()),
                            static_cast<int>(text.size()));
    if (n < 0) return std::nullopt;
    size_t padding = 0;
    if (!text.empty() && text.back() == '=') ++padding;
    if (text.size() > 1 && text[text.size() - 2] == '=') ++padding;
    out.resize(static_cast<size_t>(n) - padding);
    return out;
}

std::string uri_encode(std::string_view text, bool keep_slash) {
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    for (unsigned char c : text) {
        if (is_unreserved(c) || (keep_slash && c == '/')) {
            out.push_back(static_cast<char>(c));
        } else {
            out.push_back('%');
            out.push_back(hex_upper[c >> 4]);
            out.push_back(hex_upper[c & 15]);
        }
    }
    return out;
}

std::optional<std::string> uri_decode(std::string_view text, bool plus_is_space) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        char c = text[i];
        if (c == '%') {
            if (i + 2 >= text.size()) return std::nullopt;
            int hi = hex_value(text[i + 1]), lo = hex_value(text[i + 2]);
            if (hi < 0 || lo < 0) return std::nullopt;
            out.push_back(static_cast<char>(hi << 4 | lo));
            i += 2;
        } else if (c == '+' && plus_is_space) {
            out.push_back(' ');
        } else {
            out.push_back(c);
        }
    }
    return out;
}

std::optional<std::uint64_t> parse_u64(std::string_view text) {
    if (text.empty() || text.size() > 20) return std::nullopt;
    std::uint64_t value = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
        if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
        value = value * 10 + digit;
    }
    return value;
}

std::optional<std::uint64_t> parse_hex_u64(std::string_view text) {
    if (text.empty() || text.size() > 16) return std::nullopt;
    std::uint64_t value = 0;
    for (char c : text) {
        int v = hex_value(c);
        if (v < 0) return std::nullopt;
        value = value << 4 | static_cast<std::uint64_t>(v);
    }
    return value;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        char x = a[i], y = b[i];
        if (x >= 'A' && x <= 'Z') x = static_cast<char>(x + 32);
        if (y >= 'A' && y <= 'Z') y = static_cast<char>(y + 32);
        if (x != y) return false;
    }
    return true;
}

std::string to_lower(std::string_view text) {
    std::string out(text);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return out;
}

std::string_view trim(std::string_view text) {
    size_t b = 0, e = text.size();
    while (b < e && (text[b] == ' ' || text[b] == '\t')) ++b;
    while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t')) --e;
    return text.substr(b, e - b);
}

std::size_t decode_utf8(std::string_view text, std::size_t pos, std::uint32_t& code_point) {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t n = text.size();
    unsigned char c = s[pos];
    if (c < 0x80) {
        code_point = c;
        return 1;
    }
    std::size_t len;
    std::uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
        len = 2;
        cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        cp = c & 0x07;
    } else
        return 0;
    if (pos + len > n) return 0;
    for (std::size_t k = 1; k < len; ++k) {
        if ((s[pos + k] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[pos + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return 0;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    code_point = cp;
    return len;
}

bool is_valid_utf8(std::string_view text) {
    std::uint32_t cp = 0;
    for (std::size_t i = 0; i < text.size();) {
        std::size_t len = decode_utf8(text, i, cp);
        if (len == 0) return false;
        i += len;
    }
    return true;
}

std::string latin1_to_utf8(std::string_view latin1) {
    std::string out;
    out.reserve(latin1.size() * 2);
    for (char ch : latin1) {
        auto b = static_cast<unsigned char>(ch);
        if (b < 0x80) {
            out += ch;
        } else {
            out += static_cast<char>(0xC0 | (b >> 6));
            out += static_cast<char>(0x80 | (b & 0x3F));
        }
    }
    return out;
}

std::string mime_encode(std::string_view utf8) {
    bool plain = true;  // printable US-ASCII (and tab): safe in a header as it is
    for (char ch : utf8) {
        auto b = static_cast<unsigned char>(ch);
        plain = plain && b < 0x7f && (b >= 0x20 || b == '\t');
    }
    if (plain) return std::string(utf8);
    return "=?UTF-8?B?" + base64_encode(utf8) + "?=";
}

namespace {

// The bytes of one Q-encoded word's text: "_" is a space, "=XX" a byte.
std::optional<std::string> q_decode(std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '_') {
            out += ' ';
        } else if (text[i] == '=') {
            if (i + 2 >= text.size()) return std::nullopt;
            auto byte = hex_decode(text.substr(i + 1, 2));
            if (!byte) return std::nullopt;
            out += *byte;
            i += 2;
        } else {
            out += text[i];
        }
    }
    return out;
}

// One encoded word, "=?charset?encoding?text?=", decoded to UTF-8.
std::optional<std::string> decode_word(std::string_view word) {
    if (!word.starts_with("=?") || !word.ends_with("?=") || word.size() < 8) return std::nullopt;
    std::string_view inner = word.substr(2, word.size() - 4);
    auto q1 = inner.find('?');
    if (q1 == std::string_view::npos || q1 + 2 >= inner.size() || inner[q1 + 2] != '?')
        return std::nullopt;
    std::string_view charset = inner.substr(0, q1), text = inner.substr(q1 + 3);
    if (text.find('?') != std::string_view::npos) return std::nullopt;
    const char encoding = inner[q1 + 1];
    std::optional<std::string> bytes;
    if (encoding == 'B' || encoding == 'b') bytes = base64_decode(text);
    if (encoding == 'Q' || encoding == 'q') bytes = q_decode(text);
    if (!bytes) return std::nullopt;
    if (iequals(charset, "ISO-8859-1")) return latin1_to_utf8(*bytes);
    if (!iequals(charset, "UTF-8") && !iequals(charset, "US-ASCII")) return std::nullopt;
    if (!is_valid_utf8(*bytes)) return std::nullopt;
    if (iequals(charset, "US-ASCII"))
        for (char ch : *bytes)
            if (static_cast<unsigned char>(ch) >= 0x80) return std::nullopt;
    return bytes;
}

}  // namespace

std::optional<std::string> mime_decode(std::string_view value) {
    std::string out;
    bool any = false;
    while (!value.empty()) {
        auto start = value.find_first_not_of(" \t");
        if (start == std::string_view::npos) break;
        value.remove_prefix(start);
        auto end = value.find_first_of(" \t");
        auto word = decode_word(value.substr(0, end));
        if (!word) return std::nullopt;
        out += *word;
        any = true;
        value = end == std::string_view::npos ? std::string_view() : value.substr(end);
    }
    if (!any) return std::nullopt;
    return out;
}

bool is_xml_char(std::uint32_t cp) {
    return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
           (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
}

void append_xml_escaped(std::string& out, std::string_view text) {
    std::uint32_t cp = 0;
    for (std::size_t i = 0; i < text.size();) {
        std::size_t len = decode_utf8(text, i, cp);
        if (len == 0 || !is_xml_char(cp)) {
            out += "\xEF\xBF\xBD";  // U+FFFD
            i += len == 0 ? 1 : len;
            continue;
        }
        switch (text[i]) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            case '\r': out += "&#13;"; break;
            default: out.append(text.substr(i, len));
        }
        i += len;
    }
}

std::string xml_escaped(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    append_xml_escaped(out, text);
    return out;
}

}  // namespace fjord::base

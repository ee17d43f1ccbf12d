#pragma once

// Character classes and field-line syntax shared by the request-head parser and the chunked
// decoder's trailer section (RFC 9110 section 5, RFC 9112 section 5). Header-only so that it adds
// no translation unit.

#include <array>
#include <cstddef>
#include <string_view>

#include "base/encoding.h"
#include "base/result.h"

namespace fjord::http::syntax {

namespace detail {
constexpr std::array<bool, 256> make_tchar_table() {
    std::array<bool, 256> table{};
    for (int c = '0'; c <= '9'; ++c) table[static_cast<std::size_t>(c)] = true;
    for (int c = 'a'; c <= 'z'; ++c) table[static_cast<std::size_t>(c)] = true;
    for (int c = 'A'; c <= 'Z'; ++c) table[static_cast<std::size_t>(c)] = true;
    for (char c : std::string_view("!#$%&'*+-.^_`|~")) table[static_cast<unsigned char>(c)] = true;
    return table;
}
inline constexpr std::array<bool, 256> tchar_table = make_tchar_table();
}  // namespace detail

inline bool is_tchar(char c) { return detail::tchar_table[static_cast<unsigned char>(c)]; }

inline bool is_token(std::string_view text) {
    if (text.empty()) return false;
    for (char c : text)
        if (!is_tchar(c)) return false;
    return true;
}

// Field values may hold HTAB, visible ASCII and obs-text (0x80-0xFF), but no other control byte: a
// stray CR, LF or NUL inside a value is what header-injection and smuggling payloads look like.
inline bool is_field_value_byte(char c) {
    auto byte = static_cast<unsigned char>(c);
    return byte == '\t' || (byte >= 0x20 && byte != 0x7f);
}

inline bool is_field_value(std::string_view text) {
    for (char c : text)
        if (!is_field_value_byte(c)) return false;
    return true;
}

inline bool is_ows(char c) { return c == ' ' || c == '\t'; }

// Returns the first position at or after `pos` that is not optional whitespace.
inline std::size_t skip_ows(std::string_view text, std::size_t pos) {
    while (pos < text.size() && is_ows(text[pos])) ++pos;
    return pos;
}

// Returns the position just past the token that starts at `pos` (== pos when there is none).
inline std::size_t skip_token(std::string_view text, std::size_t pos) {
    while (pos < text.size() && is_tchar(text[pos])) ++pos;
    return pos;
}

struct field_line {
    std::string_view name;
    std::string_view value;  // trimmed of OWS
};

// Splits one field line (CRLF already removed) into name and value. Rejects obs-fold and whitespace
// between the name and the colon, because front ends that tolerate them disagree about where a
// field ends, and that disagreement is what request smuggling exploits.
inline base::result<field_line> parse_field_line(std::string_view line) {
    if (!line.empty() && is_ows(line.front()))
        return base::fail(base::errc::bad_request, "obsolete line folding in a field section");
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos)
        return base::fail(base::errc::bad_request, "field line without a colon");
    field_line field{line.substr(0, colon), base::trim(line.substr(colon + 1))};
    if (!is_token(field.name))
        return base::fail(base::errc::bad_request, "field name is not a token");
    if (!is_field_value(field.value))
        return base::fail(base::errc::bad_request, "control byte in a field value");
    return field;
}

}  // namespace fjord::http::syntax

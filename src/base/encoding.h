#pragma once

// Text encodings used by HTTP and S3: hex, base64, percent-encoding (RFC 3986 as AWS SigV4 applies it).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fjord::base {

std::string hex_encode(std::string_view raw);  // lower-case
std::optional<std::string> hex_decode(std::string_view hex);
std::string base64_encode(std::string_view raw);
std::optional<std::string> base64_decode(std::string_view text);

// Percent-encodes everything except A-Z a-z 0-9 - . _ ~ (and '/' when keep_slash), upper-case hex digits.
std::string uri_encode(std::string_view text, bool keep_slash);
// Decodes %XX escapes; '+' becomes a space only when plus_is_space. nullopt on a malformed escape.
std::optional<std::string> uri_decode(std::string_view text, bool plus_is_space);

// Parses a decimal integer that must span the whole text; nullopt on overflow or junk.
std::optional<std::uint64_t> parse_u64(std::string_view text);
std::optional<std::uint64_t> parse_hex_u64(std::string_view text);

bool iequals(std::string_view a, std::string_view b);
std::string to_lower(std::string_view text);
std::string_view trim(std::string_view text);
// Checks that text is valid UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF).
bool is_valid_utf8(std::string_view text);
// Decodes the UTF-8 sequence that starts at text[pos] into code_point and returns its length in bytes, or
// 0 when the bytes there are not valid UTF-8 (as is_valid_utf8 judges). pos must be < text.size().
std::size_t decode_utf8(std::string_view text, std::size_t pos, std::uint32_t& code_point);

// Whether a code point is a character XML 1.0 allows (TAB, LF, CR and U+0020 on, less the surrogates,
// U+FFFE and U+FFFF).
bool is_xml_char(std::uint32_t code_point);
// XML text: escapes &, <, > and quotes, and CR as a character reference (a parser would turn a raw CR
// into LF), so that every text made of XML characters comes back as it was. What XML 1.0 cannot carry
// at all (other C0 controls, U+FFFE, U+FFFF, bytes that are not UTF-8) becomes U+FFFD: the output is
// well-formed for any input. The one escaper of the project (S3 responses, the client's requests, the
// benchmarks' SVG charts).
void append_xml_escaped(std::string& out, std::string_view text);
std::string xml_escaped(std::string_view text);

// MIME encoded words (RFC 2047), as S3 carries user metadata that is not US-ASCII in headers.
// Text with a byte outside printable US-ASCII (a control byte, DEL, or anything past 0x7F; tab is kept)
// becomes one "=?UTF-8?B?<base64>?=" word, so no value can break out of its header; other text is
// unchanged.
std::string mime_encode(std::string_view utf8);
// A value made only of encoded words ("=?charset?B?...?=" or "=?charset?Q?...?=", charset UTF-8, US-ASCII
// or ISO-8859-1 in any case, separated by spaces or tabs, which are dropped) decoded to UTF-8; nullopt for
// anything else (plain text, a malformed word, an unknown charset, bytes that are not UTF-8).
std::optional<std::string> mime_decode(std::string_view value);
// ISO-8859-1 text as UTF-8 (every byte is the code point of the same number).
std::string latin1_to_utf8(std::string_view latin1);

}  // namespace fjord::base

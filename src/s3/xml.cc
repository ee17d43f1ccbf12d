#include "s3/xml.h"

#include "base/encoding.h"

namespace fjord::s3 {

namespace {

constexpr std::string_view replacement_character = "\xEF\xBF\xBD";  // U+FFFD

base::failure malformed(std::string_view why) {
    return base::fail(base::errc::malformed_xml,
                      "The XML you provided was not well-formed or did not validate against our published schema (" +
                          std::string(why) + ").");
}

// Every byte of text is UTF-8 of XML characters.
bool chars_allowed(std::string_view text) {
    std::uint32_t cp = 0;
    for (std::size_t i = 0; i < text.size();) {
        std::size_t len = base::decode_utf8(text, i, cp);
        if (len == 0 || !is_xml_char(cp)) return false;
        i += len;
    }
    return true;
}

// The reference that starts at body[pos] ('&'): returns its length, or 0 when it is not a reference XML
// allows (a predefined entity, or a character reference to an XML character).
std::size_t reference_bytes(std::string_view body, std::size_t pos) {
    std::size_t end = body.find(';', pos);
    if (end == std::string_view::npos || end - pos > 16) return 0;
    std::string_view inner = body.substr(pos + 1, end - pos - 1);
    if (inner == "lt" || inner == "gt" || inner == "amp" || inner == "apos" || inner == "quot") return end - pos + 1;
    if (inner.size() < 2 || inner[0] != '#') return 0;
    bool hex = inner[1] == 'x';
    std::string_view digits = inner.substr(hex ? 2 : 1);
    if (digits.empty()) return 0;
    std::uint32_t value = 0;
    for (char c : digits) {
        std::uint32_t d;
        if (c >= '0' && c <= '9') d = static_cast<std::uint32_t>(c - '0');
        else if (hex && c >= 'a' && c <= 'f') d = static_cast<std::uint32_t>(c - 'a' + 10);
        else if (hex && c >= 'A' && c <= 'F') d = static_cast<std::uint32_t>(c - 'A' + 10);
        else return 0;
        value = value * (hex ? 16 : 10) + d;
        if (value > 0x10FFFF) return 0;  // no character, however many digits follow (no overflow either)
    }
    return is_xml_char(value) ? end - pos + 1 : 0;
}

// Checks the raw document before pugixml sees it: pugixml decodes &#0; into a NUL (which truncates the
// text at it) and passes invalid UTF-8 through, so neither must reach it.
base::result<void> check_request_text(std::string_view body) {
    std::size_t pos = 0;
    while (pos < body.size()) {
        std::string_view rest = body.substr(pos);
        // Sections where '&' is literal: only the characters are checked there.
        for (auto [open, close] : {std::pair<std::string_view, std::string_view>{"<![CDATA[", "]]>"},
                                   {"<!--", "-->"}, {"<?", "?>"}}) {
            if (!rest.starts_with(open)) continue;
            std::size_t end = rest.find(close, open.size());
            if (end == std::string_view::npos) return malformed("unterminated section");
            if (!chars_allowed(rest.substr(0, end))) return malformed("a character XML 1.0 does not allow");
            pos += end + close.size();
            rest = {};
            break;
        }
        if (rest.empty()) continue;
        if (rest.starts_with("<!")) return malformed("a document type declaration");
        if (rest.front() == '&') {
            std::size_t len = reference_bytes(body, pos);
            if (len == 0) return malformed("a reference to no XML character, or a bare '&'");
            pos += len;
            continue;
        }
        std::uint32_t cp = 0;
        std::size_t len = base::decode_utf8(body, pos, cp);
        if (len == 0) return malformed("text that is not UTF-8");
        if (!is_xml_char(cp)) return malformed("a character XML 1.0 does not allow");
        pos += len;
    }
    return {};
}

}  // namespace

bool is_xml_char(std::uint32_t cp) {
    return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) ||
           (cp >= 0x10000 && cp <= 0x10FFFF);
}

bool xml_representable(std::string_view text) { return chars_allowed(text); }

void append_escaped(std::string& out, std::string_view text) {
    std::uint32_t cp = 0;
    for (std::size_t i = 0; i < text.size();) {
        std::size_t len = base::decode_utf8(text, i, cp);
        if (len == 0 || !is_xml_char(cp)) {
            out += replacement_character;
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

xml_writer& xml_writer::open(std::string_view name, std::string_view attributes) {
    _out += '<';
    _out += name;
    if (!attributes.empty()) {
        _out += ' ';
        _out += attributes;
    }
    _out += '>';
    return *this;
}

xml_writer& xml_writer::close(std::string_view name) {
    _out += "</";
    _out += name;
    _out += '>';
    return *this;
}

xml_writer& xml_writer::element(std::string_view name, std::string_view text) {
    open(name);
    append_escaped(_out, text);
    return close(name);
}

base::result<void> load_request_xml(pugi::xml_document& doc, std::string_view body) {
    FJORD_TRY(check_request_text(body));
    if (!doc.load_buffer(body.data(), body.size(), pugi::parse_default & ~pugi::parse_doctype, pugi::encoding_utf8))
        return malformed("not well-formed");
    return {};
}

}  // namespace fjord::s3

#include "s3/xml.h"

#include <vector>

#include "base/assert.h"
#include "base/encoding.h"

namespace fjord::s3 {

namespace {

base::failure malformed(std::string_view why) {
    return base::fail(
        base::errc::malformed_xml,
        "The XML you provided was not well-formed or did not validate against our published schema (" +
            std::string(why) + ").");
}

// Every byte of text is UTF-8 of XML characters.
bool chars_allowed(std::string_view text) {
    std::uint32_t cp = 0;
    for (std::size_t i = 0; i < text.size();) {
        std::size_t len = base::decode_utf8(text, i, cp);
        if (len == 0 || !base::is_xml_char(cp)) return false;
        i += len;
    }
    return true;
}

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// Decodes the reference at text[pos] ('&') into out; returns its length, or 0 when it is not one XML
// allows (a predefined entity, or a character reference to an XML character).
std::size_t decode_reference(std::string_view text, std::size_t pos, std::string& out) {
    std::size_t end = text.find(';', pos);
    if (end == std::string_view::npos || end - pos > 16) return 0;
    std::string_view inner = text.substr(pos + 1, end - pos - 1);
    static constexpr std::pair<std::string_view, char> predefined[] = {
        {"lt", '<'}, {"gt", '>'}, {"amp", '&'}, {"apos", '\''}, {"quot", '"'}};
    for (auto [name, c] : predefined) {
        if (inner == name) {
            out += c;
            return end - pos + 1;
        }
    }
    if (inner.size() < 2 || inner[0] != '#') return 0;
    bool hex = inner[1] == 'x';
    std::string_view digits = inner.substr(hex ? 2 : 1);
    if (digits.empty()) return 0;
    std::uint32_t value = 0;
    for (char c : digits) {
        std::uint32_t d;
        if (c >= '0' && c <= '9')
            d = static_cast<std::uint32_t>(c - '0');
        else if (hex && c >= 'a' && c <= 'f')
            d = static_cast<std::uint32_t>(c - 'a' + 10);
        else if (hex && c >= 'A' && c <= 'F')
            d = static_cast<std::uint32_t>(c - 'A' + 10);
        else
            return 0;
        value = value * (hex ? 16 : 10) + d;
        if (value > 0x10FFFF)
            return 0;  // no character, however many digits follow (no overflow either)
    }
    if (!base::is_xml_char(value)) return 0;
    append_utf8(out, value);
    return end - pos + 1;
}

// Character data or an attribute value as pugixml keeps it (references undecoded), decoded into out;
// false when a '&' starts no reference XML allows.
bool decode_text(std::string_view raw, std::string& out) {
    for (std::size_t pos = 0; pos < raw.size();) {
        std::size_t amp = raw.find('&', pos);
        out.append(
            raw.substr(pos, amp == std::string_view::npos ? std::string_view::npos : amp - pos));
        if (amp == std::string_view::npos) break;
        std::size_t len = decode_reference(raw, amp, out);
        if (len == 0) return false;
        pos = amp + len;
    }
    return true;
}

// Every reference in the tree (character data and attribute values) is one XML allows. Iterative, so a
// deeply nested document cannot exhaust the stack.
bool references_valid(const pugi::xml_document& doc) {
    std::string scratch;
    std::vector<pugi::xml_node> pending{doc};
    while (!pending.empty()) {
        pugi::xml_node node = pending.back();
        pending.pop_back();
        scratch.clear();
        if (node.type() == pugi::node_pcdata && !decode_text(node.value(), scratch)) return false;
        for (const pugi::xml_attribute& a : node.attributes()) {
            scratch.clear();
            if (!decode_text(a.value(), scratch)) return false;
        }
        for (const pugi::xml_node& child : node.children()) pending.push_back(child);
    }
    return true;
}

// The raw document before pugixml sees it: UTF-8 of XML characters throughout (the Char production holds
// for the whole document, markup, CDATA and comments alike), and no document type declaration.
base::result<void> check_request_text(std::string_view body) {
    if (!chars_allowed(body))
        return malformed("bytes that are not UTF-8, or a character XML 1.0 does not allow");
    std::string lowered = base::to_lower(body);
    if (lowered.find("<!doctype") != std::string::npos ||
        lowered.find("<!entity") != std::string::npos)
        return malformed("a document type declaration");
    return {};
}

}  // namespace

bool xml_representable(std::string_view text) { return chars_allowed(text); }

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
    base::append_xml_escaped(_out, text);
    return close(name);
}

base::result<void> load_request_xml(pugi::xml_document& doc, std::string_view body) {
    FJORD_TRY(check_request_text(body));
    // parse_ws_pcdata_single: an element whose only text is whitespace keeps it (a key may be "  ").
    const unsigned options = (pugi::parse_default | pugi::parse_ws_pcdata_single) &
                             ~pugi::parse_doctype & ~pugi::parse_escapes;
    if (!doc.load_buffer(body.data(), body.size(), options, pugi::encoding_utf8))
        return malformed("not well-formed");
    if (!references_valid(doc)) return malformed("a reference to no XML character, or a bare '&'");
    return {};
}

std::string xml_text(const pugi::xml_node& element) {
    std::string out;
    for (const pugi::xml_node& child : element.children()) {
        if (child.type() == pugi::node_cdata) {
            out += child.value();
        } else if (child.type() == pugi::node_pcdata) {
            bool ok = decode_text(child.value(), out);
            FJORD_ASSERT(ok, "xml_text of a document load_request_xml did not check");
        }
    }
    return out;
}

}  // namespace fjord::s3

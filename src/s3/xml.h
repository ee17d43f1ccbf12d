#pragma once

// XML for S3: a minimal writer for responses (elements and escaped text, nothing else), and the one way
// request bodies are read (pugixml, after the checks below; see the module README).

#include <cstdint>
#include <string>
#include <string_view>

#include <pugixml.hpp>

#include "base/result.h"

namespace fjord::s3 {

// The namespace attribute of every S3 response document's root element.
inline constexpr std::string_view s3_xmlns = "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"";

class xml_writer {
public:
    xml_writer() { _out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"; }
    xml_writer& open(std::string_view name, std::string_view attributes = {});
    xml_writer& close(std::string_view name);
    xml_writer& element(std::string_view name, std::string_view text);
    xml_writer& element(std::string_view name, std::uint64_t value) {
        return element(name, std::to_string(value));
    }
    xml_writer& element_bool(std::string_view name, bool value) {
        return element(name, value ? "true" : "false");
    }
    std::string take() { return std::move(_out); }

private:
    std::string _out;
};

// Whether text is valid UTF-8 made only of characters an XML 1.0 document can carry.
bool xml_representable(std::string_view text);

// Loads a request body. Refused with malformed_xml: a document type declaration (no entities, no
// external references), bytes that are not UTF-8, characters XML 1.0 does not allow (raw, or as
// references such as &#0; or &#xD800;, or references too large to be characters) anywhere in the
// document, a '&' that starts no valid reference, and anything pugixml finds not well-formed.
// pugixml is told not to decode references (it would turn &#0; into a NUL that ends the text): the
// tree keeps them as sent, every one in it is checked here, and xml_text decodes them.
base::result<void> load_request_xml(pugi::xml_document& doc, std::string_view body);

// The text of an element of a document load_request_xml accepted: its character data with references
// decoded, and its CDATA sections as they are, in order. Valid UTF-8 of XML characters, exactly as sent
// (a NUL can never appear in it). Empty for a null node.
std::string xml_text(const pugi::xml_node& element);
// The same for the named child element (the first of that name).
inline std::string xml_child_text(const pugi::xml_node& parent, const char* name) {
    return xml_text(parent.child(name));
}

}  // namespace fjord::s3

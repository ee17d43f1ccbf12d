#pragma once

// A minimal XML writer for S3 responses: elements and escaped text, nothing else. Request bodies are
// parsed with pugixml (see the module README).

#include <string>
#include <string_view>

namespace fjord::s3 {

class xml_writer {
public:
    xml_writer() { _out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"; }
    xml_writer& open(std::string_view name, std::string_view attributes = {});
    xml_writer& close(std::string_view name);
    xml_writer& element(std::string_view name, std::string_view text);
    xml_writer& element(std::string_view name, std::uint64_t value) { return element(name, std::to_string(value)); }
    xml_writer& element_bool(std::string_view name, bool value) { return element(name, value ? "true" : "false"); }
    std::string take() { return std::move(_out); }

private:
    std::string _out;
};

// Escapes &, <, >, " and ' and replaces characters XML 1.0 cannot carry with U+FFFD.
void append_escaped(std::string& out, std::string_view text);

}  // namespace fjord::s3

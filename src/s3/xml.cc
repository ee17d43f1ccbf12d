#include "s3/xml.h"

namespace fjord::s3 {

void append_escaped(std::string& out, std::string_view text) {
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') out += "\xEF\xBF\xBD";
                else out.push_back(c);
        }
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

}  // namespace fjord::s3

// Fuzzes the way every XML request body is read (s3::load_request_xml) and the CompleteMultipartUpload
// body parser on top of it (s3::parse_complete_body): the one XML document a client sends that drives a
// commit.
//
// Input: the request body. Invariants checked: parsing never crashes; an error is malformed_xml;
// every element's text of a loaded document, as xml_text decodes it, and every name and attribute
// value, is valid UTF-8 made only of XML characters (no NUL from &#0;, no surrogate from &#xD800;, also
// where the reference hides behind "<!--" inside an attribute value); a CompleteMultipartUpload that parses has 1..10000
// parts, each numbered 1..10000, no ETag or checksum longer than the body, and only XML text in them;
// and a second parse gives the same parts (parsing is a pure function of the body).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "s3/service_internal.h"
#include "s3/xml.h"

namespace {

constexpr std::uint32_t max_part_number = 10000;  // as S3 (and multipart_ops.cc) define it

// Every element's text (xml_text: references decoded, with its real length, so a NUL would show) and
// every name and raw attribute value in the tree is XML text. Iterative, like the reader itself.
void check_tree(const pugi::xml_document& doc) {
    std::vector<pugi::xml_node> pending{doc};
    while (!pending.empty()) {
        pugi::xml_node node = pending.back();
        pending.pop_back();
        FUZZ_CHECK(fjord::s3::xml_representable(node.name()));
        if (node.type() == pugi::node_element)
            FUZZ_CHECK(fjord::s3::xml_representable(fjord::s3::xml_text(node)));
        for (const pugi::xml_attribute& a : node.attributes()) {
            FUZZ_CHECK(fjord::s3::xml_representable(a.name()));
            FUZZ_CHECK(fjord::s3::xml_representable(a.value()));
        }
        for (const pugi::xml_node& child : node.children()) pending.push_back(child);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string body(reinterpret_cast<const char*>(data), size);
    pugi::xml_document doc;
    auto loaded = fjord::s3::load_request_xml(doc, body);
    if (loaded)
        check_tree(doc);
    else
        FUZZ_CHECK(loaded.code() == fjord::base::errc::malformed_xml);
    auto parts = fjord::s3::parse_complete_body(body);
    if (!parts) {
        FUZZ_CHECK(parts.code() == fjord::base::errc::malformed_xml);
        return 0;
    }
    FUZZ_CHECK(!parts->empty() && parts->size() <= max_part_number);
    for (const auto& part : *parts) {
        FUZZ_CHECK(part.number >= 1 && part.number <= max_part_number);
        FUZZ_CHECK(part.etag.size() <= body.size());
        FUZZ_CHECK(part.checksum.size() <= body.size());
        FUZZ_CHECK(fjord::s3::xml_representable(part.etag) &&
                   fjord::s3::xml_representable(part.checksum));
    }
    auto again = fjord::s3::parse_complete_body(body);
    FUZZ_CHECK(again && again->size() == parts->size());
    for (std::size_t i = 0; i < parts->size(); ++i) {
        FUZZ_CHECK((*again)[i].number == (*parts)[i].number);
        FUZZ_CHECK((*again)[i].etag == (*parts)[i].etag);
        FUZZ_CHECK((*again)[i].checksum == (*parts)[i].checksum);
    }
    return 0;
}

// DeleteObjects, object and bucket tagging, and GetObjectAttributes.

#include <pugixml.hpp>

#include <algorithm>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "io/wait_group.h"
#include "s3/service.h"
#include "s3/operations.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {
constexpr std::size_t max_delete_keys = 1000;
constexpr std::size_t max_tags = 10;
constexpr std::size_t max_bucket_tags = 50;
// The bucket attribute that holds a bucket's tag set (store::bucket_info::attributes).
constexpr const char* bucket_tags_attribute = "s3.tagging";
constexpr std::size_t deletes_in_flight =
    64;  // enough for group commit to batch the journal writes

// Tags come back in XML (GetObjectTagging): only text XML can carry is accepted, whichever way they came
// (x-amz-tagging is URL-encoded, so any byte can arrive there).
base::result<void> check_tag(const std::string& key, const std::string& value) {
    auto control = [](const std::string& text) {
        return std::any_of(text.begin(), text.end(),
                           [](char c) { return static_cast<unsigned char>(c) < 0x20; });
    };
    if (key.empty() || key.size() > 128 || value.size() > 256 || !xml_representable(key) ||
        !xml_representable(value) || control(key) || control(value))
        return base::fail(base::errc::invalid_tag,
                          "The TagKey or TagValue you have provided is invalid");
    return {};
}

using tag_list = std::vector<std::pair<std::string, std::string>>;

// A Tagging document's TagSet, checked as S3 checks it: valid tags, no key twice, at most `max`.
base::result<tag_list> parse_tag_set(std::string_view body, std::size_t max, const char* too_many) {
    pugi::xml_document doc;
    if (auto parsed = load_request_xml(doc, body); !parsed) return parsed.as_failure();
    pugi::xml_node set = doc.child("Tagging").child("TagSet");
    if (!set) return base::fail(base::errc::malformed_xml, "expected Tagging/TagSet");
    tag_list tags;
    for (pugi::xml_node t : set.children("Tag")) {
        std::string key = xml_child_text(t, "Key"), value = xml_child_text(t, "Value");
        FJORD_TRY(check_tag(key, value));
        for (const auto& existing : tags)
            if (existing.first == key)
                return base::fail(base::errc::invalid_tag,
                                  "Cannot provide multiple Tags with the same key");
        tags.emplace_back(std::move(key), std::move(value));
    }
    if (tags.size() > max) return base::fail(base::errc::invalid_tag, too_many);
    return tags;
}

std::string tagging_xml(const tag_list& tags) {
    xml_writer x;
    x.open("Tagging", s3_xmlns).open("TagSet");
    for (const auto& [key, value] : tags)
        x.open("Tag").element("Key", key).element("Value", value).close("Tag");
    x.close("TagSet").close("Tagging");
    return x.take();
}

// A bucket's tags as its attribute holds them: "<length>:<key><length>:<value>" for each, in order.
std::string encode_tags(const tag_list& tags) {
    std::string out;
    for (const auto& [key, value] : tags)
        for (const std::string* s : {&key, &value}) out += std::to_string(s->size()) + ":" + *s;
    return out;
}

tag_list decode_tags(std::string_view text) {
    tag_list tags;
    std::vector<std::string> parts;
    while (!text.empty()) {
        auto colon = text.find(':');
        auto n = base::parse_u64(text.substr(0, colon));
        if (colon == std::string_view::npos || !n || *n > text.size() - colon - 1) break;
        parts.emplace_back(text.substr(colon + 1, *n));
        text.remove_prefix(colon + 1 + *n);
    }
    for (std::size_t i = 0; i + 1 < parts.size(); i += 2)
        tags.emplace_back(std::move(parts[i]), std::move(parts[i + 1]));
    return tags;
}

struct delete_outcome {
    std::string key;
    std::string if_match;                // the optional per-object <ETag> condition
    std::string version_id;              // the optional <VersionId>, as sent
    std::optional<std::string> version;  // the version it names (parse_version_id)
    base::errc code = base::errc::ok;
    std::string message;
    std::optional<std::string>
        marker_version;  // a delete marker made or removed: its id ("": null)
};

io::task<void> delete_one(store::object_store* store, std::string bucket, delete_outcome* out) {
    store::write_conditions conditions;
    if (!out->if_match.empty()) conditions.if_match_etag = unquote_etag(out->if_match);
    base::result<std::optional<store::object_record>> removed = base::fail(base::errc::internal);
    if (out->version) {
        auto versions = offered(store->versions_of(bucket), bucket, "versions");
        if (versions)
            removed = co_await (*versions)->remove_version(bucket, out->key, *out->version);
        else
            removed = versions.as_failure();
    } else
        removed = co_await store->remove(bucket, out->key, conditions);
    if (!removed) {
        out->code = removed.code();
        out->message = s3_message(removed.err());
        // The client's message holds no detail of these (s3_message): the log does.
        if (base::errc_http_status(out->code) == 500 ||
            out->code == base::errc::service_unavailable)
            LOG_WARN("DeleteObjects s3://%s/%s: %s", bucket.c_str(), out->key.c_str(),
                     removed.err().message.c_str());
    } else if (*removed && (*removed)->delete_marker) {
        out->marker_version = (*removed)->version_id;
    }
}

// A key and version a DeleteObjects entry may name; otherwise its per-key error is set.
bool check_entry(delete_outcome& o, bool versioned) {
    if (o.key.empty() || o.key.size() > 1024) {
        o.code = o.key.empty() ? base::errc::invalid_argument : base::errc::key_too_long;
        o.message = o.key.empty() ? "The key is empty" : "Your key is too long";
        return false;
    }
    if (o.version_id.empty()) return true;
    auto version = parse_version_id(o.version_id, versioned);
    if (!version) {
        o.code = version.code();
        o.message = version.err().message;
        return false;
    }
    o.version = std::move(*version);
    return true;
}

void deleted_xml(xml_writer& x, const delete_outcome& o) {
    x.open("Deleted").element("Key", o.key);
    if (!o.version_id.empty()) x.element("VersionId", o.version_id);
    if (o.marker_version) {
        x.element_bool("DeleteMarker", true);
        x.element("DeleteMarkerVersionId", o.marker_version->empty() ? "null" : *o.marker_version);
    }
    x.close("Deleted");
}
}  // namespace

base::result<std::vector<std::pair<std::string, std::string>>> parse_object_tagging(
    std::string_view body) {
    return parse_tag_set(body, max_tags, "Object tags cannot be greater than 10");
}

base::result<std::vector<std::pair<std::string, std::string>>> parse_tagging_header(
    std::string_view text) {
    std::vector<std::pair<std::string, std::string>> tags;
    while (!text.empty()) {
        auto amp = text.find('&');
        std::string_view item = text.substr(0, amp);
        text = amp == std::string_view::npos ? std::string_view{} : text.substr(amp + 1);
        if (item.empty()) continue;
        auto eq = item.find('=');
        auto key = base::uri_decode(item.substr(0, eq), true);
        auto value = base::uri_decode(
            eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1), true);
        if (!key || !value)
            return base::fail(
                base::errc::invalid_argument,
                "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag name duplicates.");
        FJORD_TRY(check_tag(*key, *value));
        for (const auto& t : tags)
            if (t.first == *key)
                return base::fail(base::errc::invalid_tag,
                                  "Cannot provide multiple Tags with the same key");
        tags.emplace_back(std::move(*key), std::move(*value));
    }
    if (tags.size() > max_tags)
        return base::fail(base::errc::invalid_tag, "Object tags cannot be greater than 10");
    return tags;
}

io::task<void> delete_objects(context& c) {
    const http::request_head& head = c.ex.head();
    bool has_integrity =
        head.find("content-md5") != nullptr || !head.value_of("x-amz-trailer").empty();
    for (const auto& h : head.headers)
        if (base::to_lower(h.name).starts_with("x-amz-checksum-") &&
            !base::iequals(h.name, "x-amz-checksum-type"))
            has_integrity = true;
    if (!has_integrity)
        co_return co_await send_error(c, {base::errc::invalid_request,
                                          "Missing required header for this request: Content-MD5"});
    auto body = co_await read_verified_body(c, 2 * 1024 * 1024);
    if (!body) co_return co_await send_error(c, body.err());
    pugi::xml_document doc;
    if (auto parsed = load_request_xml(doc, *body); !parsed)
        co_return co_await send_error(c, parsed.err());
    pugi::xml_node root = doc.child("Delete");
    if (!root)
        co_return co_await send_error(c, {base::errc::malformed_xml, "expected a Delete document"});
    bool quiet = base::iequals(base::trim(xml_child_text(root, "Quiet")), "true");
    std::vector<delete_outcome> outcomes;
    for (pugi::xml_node o : root.children("Object")) {
        if (outcomes.size() == max_delete_keys)
            co_return co_await send_error(
                c,
                {base::errc::malformed_xml, "A DeleteObjects request may name at most 1000 keys"});
        outcomes.push_back({xml_child_text(o, "Key"),
                            std::string(base::trim(xml_child_text(o, "ETag"))),
                            xml_child_text(o, "VersionId"),
                            std::nullopt,
                            base::errc::ok,
                            {},
                            std::nullopt});
    }
    if (outcomes.empty())
        co_return co_await send_error(c, {base::errc::malformed_xml, "No keys to delete"});
    if (!c.svc.store().bucket_exists(c.req.bucket))
        co_return co_await send_error(
            c, {base::errc::no_such_bucket, "The specified bucket does not exist"});
    const bool versioned = has_versioning(c.svc.store(), c.req.bucket);
    const bucket_access access = access_of(c, c.req.bucket);  // each key is checked on its own
    io::wait_group group(deletes_in_flight);
    for (auto& o : outcomes) {
        if (!check_entry(o, versioned)) continue;
        if (!may_delete(c, access, o.key, o.version.has_value())) {
            o.code = base::errc::access_denied;
            o.message = "Access Denied";
            continue;
        }
        co_await group.spawn(delete_one(&c.svc.store(), c.req.bucket, &o));
    }
    co_await group.wait();
    xml_writer x;
    x.open("DeleteResult", s3_xmlns);
    for (const auto& o : outcomes) {
        if (o.code == base::errc::ok) {
            if (!quiet) deleted_xml(x, o);
        } else {
            x.open("Error").element("Key", o.key).element("Code", base::errc_s3_code(o.code));
            x.element("Message", o.message).close("Error");
        }
    }
    x.close("DeleteResult");
    co_await send_xml(c, 200, x.take());
}

io::task<void> put_object_tagging(context& c) {
    auto body = co_await read_verified_body(c, 64 * 1024);
    if (!body) co_return co_await send_error(c, body.err());
    auto tags = parse_tag_set(*body, max_tags, "Object tags cannot be greater than 10");
    if (!tags) co_return co_await send_error(c, tags.err());
    auto edit = [tags = std::move(*tags),
                 allowed = c.check_of_object()](store::object_record& r) -> base::result<void> {
        FJORD_TRY(allowed(r));
        r.tags = tags;
        return {};
    };
    auto updated = co_await update_named(c, edit);
    if (!updated) co_return co_await send_error(c, updated.err());
    auto headers = c.common_headers();
    answer_version(headers, *updated, c);
    (void)co_await c.ex.send_all(200, headers, "");
}

io::task<void> get_object_tagging(context& c) {
    auto found = co_await head_named(c);
    if (!found) co_return co_await send_error(c, visible_error(c, found.err()));
    if (auto allowed = c.check_of_object()(*found); !allowed)
        co_return co_await send_error(c, allowed.err());
    auto headers = c.common_headers();
    answer_version(headers, *found, c);
    headers.emplace_back("Content-Type", "application/xml");
    (void)co_await c.ex.send_all(200, headers, tagging_xml(found->tags));
}

// A bucket's tag set is one bucket attribute, replaced whole; an empty TagSet removes it, as deleting it.
io::task<void> put_bucket_tagging(context& c) {
    auto body = co_await read_verified_body(c, 64 * 1024);
    if (!body) co_return co_await send_error(c, body.err());
    auto tags = parse_tag_set(*body, max_bucket_tags, "Bucket tag count cannot be greater than 50");
    if (!tags) co_return co_await send_error(c, tags.err());
    std::optional<std::string> value;
    if (!tags->empty()) value = encode_tags(*tags);
    auto set = co_await set_bucket_attribute(c, c.req.bucket, bucket_tags_attribute, value);
    if (!set) co_return co_await send_error(c, set.err());
    (void)co_await c.ex.send_all(204, c.common_headers(), "");
}

io::task<void> get_bucket_tagging(context& c) {
    auto info = c.svc.store().find_bucket(c.req.bucket);
    if (!info)
        co_return co_await send_error(
            c, {base::errc::no_such_bucket, "The specified bucket does not exist"});
    auto it = info->attributes.find(bucket_tags_attribute);
    if (it == info->attributes.end())
        co_return co_await send_error(c,
                                      {base::errc::no_such_tag_set, "The TagSet does not exist"});
    co_await send_xml(c, 200, tagging_xml(decode_tags(it->second)));
}

io::task<void> delete_bucket_tagging(context& c) {
    auto set = co_await set_bucket_attribute(c, c.req.bucket, bucket_tags_attribute, std::nullopt);
    if (!set) co_return co_await send_error(c, set.err());
    (void)co_await c.ex.send_all(204, c.common_headers(), "");
}

io::task<void> delete_object_tagging(context& c) {
    auto edit = [allowed = c.check_of_object()](store::object_record& r) -> base::result<void> {
        FJORD_TRY(allowed(r));
        r.tags.clear();
        return {};
    };
    auto updated = co_await update_named(c, edit);
    if (!updated) co_return co_await send_error(c, updated.err());
    auto headers = c.common_headers();
    answer_version(headers, *updated, c);
    (void)co_await c.ex.send_all(204, headers, "");
}

io::task<void> get_object_attributes(context& c) {
    auto found = co_await head_named(c);
    if (!found) co_return co_await send_error(c, visible_error(c, found.err()));
    if (auto allowed = c.check_of_object()(*found); !allowed)
        co_return co_await send_error(c, allowed.err());
    const store::object_record& r = *found;
    std::string wanted = base::to_lower(c.ex.head().value_of("x-amz-object-attributes"));
    if (wanted.empty())
        co_return co_await send_error(
            c,
            {base::errc::invalid_argument,
             "The x-amz-object-attributes header specifying the attributes to be retrieved is either missing or empty"});
    auto asked = [&](std::string_view name) { return wanted.find(name) != std::string::npos; };
    xml_writer x;
    x.open("GetObjectAttributesResponse", s3_xmlns);
    if (asked("etag")) x.element("ETag", r.etag);
    if (asked("checksum")) {
        if (auto alg = parse_checksum_algorithm(r.checksum_algorithm)) {
            x.open("Checksum")
                .element("Checksum" + std::string(checksum_name(*alg)), r.checksum_value);
            x.element("ChecksumType", r.checksum_value.find('-') == std::string::npos
                                          ? "FULL_OBJECT"
                                          : "COMPOSITE");
            x.close("Checksum");
        }
    }
    if (asked("objectparts") && !r.part_checksums.empty()) {
        std::uint64_t max_parts =
            base::parse_u64(c.ex.head().value_of("x-amz-max-parts")).value_or(1000);
        std::uint64_t marker =
            base::parse_u64(c.ex.head().value_of("x-amz-part-number-marker")).value_or(0);
        max_parts = std::min<std::uint64_t>(max_parts, 1000);
        auto alg = parse_checksum_algorithm(r.checksum_algorithm);
        x.open("ObjectParts")
            .element("PartsCount", r.part_count())
            .element("PartNumberMarker", marker);
        std::uint64_t listed = 0, last = marker;
        for (std::uint64_t i = marker; i < r.part_count() && listed < max_parts; ++i, ++listed) {
            x.open("Part").element("PartNumber", i + 1).element("Size", r.part_size_bytes(i));
            if (alg && !r.part_checksums[i].empty())
                x.element("Checksum" + std::string(checksum_name(*alg)), r.part_checksums[i]);
            x.close("Part");
            last = i + 1;
        }
        x.element("NextPartNumberMarker", last).element("MaxParts", max_parts);
        x.element_bool("IsTruncated", last < r.part_count());
        x.close("ObjectParts");
    }
    if (asked("storageclass")) x.element("StorageClass", "STANDARD");
    if (asked("objectsize")) x.element("ObjectSize", r.size_bytes);
    x.close("GetObjectAttributesResponse");
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", "application/xml");
    headers.emplace_back("Last-Modified",
                         base::format_http_date(static_cast<std::time_t>(r.modified_ms / 1000)));
    answer_version(headers, r, c);
    (void)co_await c.ex.send_all(200, headers, x.take());
}

}  // namespace fjord::s3

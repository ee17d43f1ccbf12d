#include "s3/lifecycle.h"

#include <pugixml.hpp>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "io/ops.h"
#include "io/reactor.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {
constexpr std::size_t max_rules = 1000;

base::failure malformed(std::string what) {
    return base::fail(base::errc::malformed_xml,
                      "The XML you provided was not well-formed or did not validate against our "
                      "published schema (" +
                          std::move(what) + ")");
}

base::failure invalid(std::string what) {
    return base::fail(base::errc::invalid_argument, std::move(what));
}

// A positive whole number of days (or versions, with zero allowed).
base::result<std::uint32_t> count_of(const pugi::xml_node& parent, const char* name,
                                     bool zero_allowed) {
    auto n = base::parse_u64(std::string(base::trim(xml_child_text(parent, name))));
    if (!n || *n > 1000000 || (*n == 0 && !zero_allowed))
        return invalid(std::string("'") + name + "' must be a positive integer");
    return static_cast<std::uint32_t>(*n);
}

// "2027-01-01T00:00:00Z" (fractions allowed, all zero): S3 takes only midnight UTC.
base::result<std::int64_t> midnight_of(std::string_view text) {
    std::tm tm{};
    char rest[32] = {0};
    std::string s(base::trim(text));
    if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%31s", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                    &tm.tm_hour, &tm.tm_min, &tm.tm_sec, rest) < 6)
        return invalid("'Date' must be in ISO 8601 format");
    std::string tail = rest;
    if (tm.tm_hour || tm.tm_min || tm.tm_sec ||
        (tail != "Z" && tail != ".000Z" && tail != "+00:00" && !tail.empty()))
        return invalid("'Date' must be at midnight GMT");
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return static_cast<std::int64_t>(timegm(&tm));
}

base::result<void> parse_tag(const pugi::xml_node& tag, lifecycle_filter& f) {
    std::string key = xml_child_text(tag, "Key");
    if (key.empty()) return malformed("a Tag without a Key");
    f.tags.emplace_back(std::move(key), xml_child_text(tag, "Value"));
    return {};
}

base::result<void> parse_sizes(const pugi::xml_node& node, lifecycle_filter& f) {
    for (const char* name : {"ObjectSizeGreaterThan", "ObjectSizeLessThan"}) {
        if (!node.child(name)) continue;
        auto n = base::parse_u64(std::string(base::trim(xml_child_text(node, name))));
        if (!n) return invalid(std::string("'") + name + "' must be a whole number of bytes");
        (std::string_view(name) == "ObjectSizeLessThan" ? f.size_less_than : f.size_greater_than) =
            *n;
    }
    return {};
}

base::result<lifecycle_filter> parse_filter(const pugi::xml_node& rule) {
    lifecycle_filter f;
    pugi::xml_node filter = rule.child("Filter");
    if (rule.child("Prefix")) {
        if (filter) return malformed("a Rule with both Prefix and Filter");
        f.prefix = xml_child_text(rule, "Prefix");
        f.legacy_prefix = true;
        return f;
    }
    if (!filter) return f;  // every object (S3 takes a rule without a filter as an empty one)
    int parts = 0;
    for (pugi::xml_node child : filter.children()) parts += child.type() == pugi::node_element;
    if (parts > 1) return malformed("a Filter may hold one of Prefix, Tag, And and object sizes");
    f.prefix = xml_child_text(filter, "Prefix");
    if (pugi::xml_node tag = filter.child("Tag")) FJORD_TRY(parse_tag(tag, f));
    FJORD_TRY(parse_sizes(filter, f));
    if (pugi::xml_node both = filter.child("And")) {
        f.prefix = xml_child_text(both, "Prefix");
        for (pugi::xml_node tag : both.children("Tag")) FJORD_TRY(parse_tag(tag, f));
        FJORD_TRY(parse_sizes(both, f));
    }
    return f;
}

base::result<void> parse_expiration(const pugi::xml_node& e, lifecycle_rule& r) {
    const bool days = bool(e.child("Days")), date = bool(e.child("Date"));
    const bool marker = bool(e.child("ExpiredObjectDeleteMarker"));
    if (days + date + marker != 1)
        return malformed("an Expiration holds one of Days, Date and ExpiredObjectDeleteMarker");
    if (days) {
        auto n = count_of(e, "Days", false);
        if (!n) return n.as_failure();
        r.expiration_days = *n;
    } else if (date) {
        auto at = midnight_of(xml_child_text(e, "Date"));
        if (!at) return at.as_failure();
        r.expiration_date_s = *at;
    } else {
        std::string text(base::trim(xml_child_text(e, "ExpiredObjectDeleteMarker")));
        if (text != "true" && text != "false")
            return malformed("ExpiredObjectDeleteMarker is true or false");
        r.expired_object_delete_marker = text == "true";
    }
    return {};
}

base::result<void> parse_actions(const pugi::xml_node& rule, lifecycle_rule& r) {
    if (rule.child("Transition") || rule.child("NoncurrentVersionTransition"))
        return base::fail(base::errc::not_implemented,
                          "Fjord has one storage class: transitions are not supported");
    if (pugi::xml_node e = rule.child("Expiration")) FJORD_TRY(parse_expiration(e, r));
    if (pugi::xml_node n = rule.child("NoncurrentVersionExpiration")) {
        auto days = count_of(n, "NoncurrentDays", false);
        if (!days) return days.as_failure();
        r.noncurrent_days = *days;
        if (n.child("NewerNoncurrentVersions")) {
            auto newer = count_of(n, "NewerNoncurrentVersions", false);
            if (!newer) return newer.as_failure();
            r.newer_noncurrent_versions = *newer;
        }
    }
    if (pugi::xml_node a = rule.child("AbortIncompleteMultipartUpload")) {
        auto days = count_of(a, "DaysAfterInitiation", false);
        if (!days) return days.as_failure();
        r.abort_upload_days = *days;
    }
    if (pugi::xml_node k = rule.child("FjordKeepNewest")) {
        auto count = count_of(k, "Count", false);
        if (!count) return count.as_failure();
        r.keep_newest = *count;
        r.keep_newest_delimiter = xml_child_text(k, "Delimiter");
    }
    if (!r.expiration_days && !r.expiration_date_s && !r.expired_object_delete_marker &&
        !r.noncurrent_days && !r.abort_upload_days && !r.keep_newest && !rule.child("Expiration"))
        return base::fail(base::errc::invalid_request,
                          "At least one action needs to be specified in a rule");
    return {};
}

base::result<lifecycle_rule> parse_rule(const pugi::xml_node& rule) {
    lifecycle_rule r;
    r.id = xml_child_text(rule, "ID");
    if (r.id.size() > 255) return invalid("ID length should not exceed allowed limit of 255");
    std::string status(base::trim(xml_child_text(rule, "Status")));
    if (status != "Enabled" && status != "Disabled")
        return malformed("Status is Enabled or Disabled");
    r.enabled = status == "Enabled";
    auto filter = parse_filter(rule);
    if (!filter) return filter.as_failure();
    r.filter = std::move(*filter);
    FJORD_TRY(parse_actions(rule, r));
    if ((r.expired_object_delete_marker || r.abort_upload_days) && !r.filter.tags.empty())
        return invalid(
            "ExpiredObjectDeleteMarker and AbortIncompleteMultipartUpload cannot be "
            "combined with a tag filter");
    return r;
}

void filter_xml(xml_writer& x, const lifecycle_filter& f) {
    if (f.legacy_prefix) {
        x.element("Prefix", f.prefix);
        return;
    }
    x.open("Filter");
    const int parts = !f.prefix.empty() + static_cast<int>(f.tags.size()) +
                      f.size_greater_than.has_value() + f.size_less_than.has_value();
    if (parts > 1) x.open("And");
    if (!f.prefix.empty() || parts == 0) x.element("Prefix", f.prefix);
    for (const auto& [key, value] : f.tags)
        x.open("Tag").element("Key", key).element("Value", value).close("Tag");
    if (f.size_greater_than) x.element("ObjectSizeGreaterThan", *f.size_greater_than);
    if (f.size_less_than) x.element("ObjectSizeLessThan", *f.size_less_than);
    if (parts > 1) x.close("And");
    x.close("Filter");
}

void actions_xml(xml_writer& x, const lifecycle_rule& r) {
    if (r.expiration_days || r.expiration_date_s || r.expired_object_delete_marker) {
        x.open("Expiration");
        if (r.expiration_days) x.element("Days", *r.expiration_days);
        if (r.expiration_date_s)
            x.element("Date", base::format_iso8601_ms(*r.expiration_date_s * 1000));
        if (r.expired_object_delete_marker) x.element_bool("ExpiredObjectDeleteMarker", true);
        x.close("Expiration");
    }
    if (r.noncurrent_days) {
        x.open("NoncurrentVersionExpiration").element("NoncurrentDays", *r.noncurrent_days);
        if (r.newer_noncurrent_versions)
            x.element("NewerNoncurrentVersions", *r.newer_noncurrent_versions);
        x.close("NoncurrentVersionExpiration");
    }
    if (r.abort_upload_days)
        x.open("AbortIncompleteMultipartUpload")
            .element("DaysAfterInitiation", *r.abort_upload_days)
            .close("AbortIncompleteMultipartUpload");
    if (r.keep_newest) {
        x.open("FjordKeepNewest").element("Count", *r.keep_newest);
        if (!r.keep_newest_delimiter.empty()) x.element("Delimiter", r.keep_newest_delimiter);
        x.close("FjordKeepNewest");
    }
}
}  // namespace

base::result<lifecycle_configuration> parse_lifecycle(std::string_view body) {
    pugi::xml_document doc;
    FJORD_TRY(load_request_xml(doc, body));
    pugi::xml_node root = doc.child("LifecycleConfiguration");
    if (!root) return malformed("expected a LifecycleConfiguration document");
    lifecycle_configuration config;
    std::set<std::string> ids;
    for (pugi::xml_node node : root.children("Rule")) {
        if (config.rules.size() == max_rules) return invalid("at most 1000 rules");
        auto rule = parse_rule(node);
        if (!rule) return rule.as_failure();
        if (!rule->id.empty() && !ids.insert(rule->id).second)
            return invalid("Rule ID must be unique. Found same ID for more than one rule");
        config.rules.push_back(std::move(*rule));
    }
    if (config.rules.empty()) return malformed("a LifecycleConfiguration holds at least one Rule");
    return config;
}

std::string lifecycle_xml(const lifecycle_configuration& config) {
    xml_writer x;
    x.open("LifecycleConfiguration", s3_xmlns);
    for (const auto& r : config.rules) {
        x.open("Rule");
        if (!r.id.empty()) x.element("ID", r.id);
        filter_xml(x, r.filter);
        x.element("Status", r.enabled ? "Enabled" : "Disabled");
        actions_xml(x, r);
        x.close("Rule");
    }
    x.close("LifecycleConfiguration");
    return x.take();
}

}  // namespace fjord::s3

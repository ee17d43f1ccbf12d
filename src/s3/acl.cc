#include "s3/acl.h"

#include <array>

#include <pugixml.hpp>

#include "base/encoding.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

constexpr std::string_view xsi = "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"";

struct group_name {
    grantee_kind kind;
    std::string_view uri;
};
constexpr std::array<group_name, 3> groups{{
    {grantee_kind::all_users, "http://acs.amazonaws.com/groups/global/AllUsers"},
    {grantee_kind::authenticated_users,
     "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"},
    {grantee_kind::log_delivery, "http://acs.amazonaws.com/groups/s3/LogDelivery"},
}};

std::optional<grantee_kind> group_of(std::string_view uri) {
    for (const auto& g : groups)
        if (g.uri == uri) return g.kind;
    return std::nullopt;
}

std::string_view uri_of(grantee_kind kind) {
    for (const auto& g : groups)
        if (g.kind == kind) return g.uri;
    return {};
}

struct permission_name {
    acl_permission permission;
    std::string_view name;
};
constexpr std::array<permission_name, 5> permissions{{
    {acl_permission::read, "READ"},
    {acl_permission::write, "WRITE"},
    {acl_permission::read_acp, "READ_ACP"},
    {acl_permission::write_acp, "WRITE_ACP"},
    {acl_permission::full_control, "FULL_CONTROL"},
}};

std::optional<acl_permission> permission_of(std::string_view name) {
    for (const auto& p : permissions)
        if (p.name == name) return p.permission;
    return std::nullopt;
}

std::string_view name_of(acl_permission permission) {
    for (const auto& p : permissions)
        if (p.permission == permission) return p.name;
    return {};
}

bool covers(acl_permission granted, acl_permission wanted) {
    auto g = static_cast<unsigned>(granted), w = static_cast<unsigned>(wanted);
    return (g & w) == w;
}

acl_grant user_grant(const std::string& id, acl_permission p) {
    return {grantee_kind::user, id, p};
}
acl_grant group_grant(grantee_kind kind, acl_permission p) { return {kind, {}, p}; }

// The grants of a canned ACL: what it adds first, then the owner's FULL_CONTROL (the order S3-compatible
// servers answer them in, which suites compare against).
base::result<access_control_list> canned_acl(std::string_view name, const std::string& owner,
                                             const std::string& bucket_owner) {
    access_control_list acl{owner, {}};
    using p = acl_permission;
    if (name == "public-read" || name == "public-read-write") {
        acl.grants.push_back(group_grant(grantee_kind::all_users, p::read));
        if (name == "public-read-write")
            acl.grants.push_back(group_grant(grantee_kind::all_users, p::write));
    } else if (name == "authenticated-read") {
        acl.grants.push_back(group_grant(grantee_kind::authenticated_users, p::read));
    } else if (name == "bucket-owner-read" || name == "bucket-owner-full-control") {
        if (bucket_owner != owner)
            acl.grants.push_back(
                user_grant(bucket_owner, name == "bucket-owner-read" ? p::read : p::full_control));
    } else if (name == "log-delivery-write") {
        acl.grants.push_back(group_grant(grantee_kind::log_delivery, p::write));
        acl.grants.push_back(group_grant(grantee_kind::log_delivery, p::read_acp));
    } else if (name != "private") {
        return base::fail(base::errc::invalid_argument, "Unknown canned ACL: " + std::string(name));
    }
    acl.grants.push_back(user_grant(owner, p::full_control));
    return acl;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// One x-amz-grant-* header: `id="KEY", uri="http://acs...", emailAddress="..."`, comma-separated.
base::result<void> parse_grant_header(std::string_view value, acl_permission p,
                                      std::vector<acl_grant>& out) {
    while (!value.empty()) {
        auto comma = value.find(',');
        std::string_view item = trim(value.substr(0, comma));
        value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
        auto eq = item.find('=');
        if (eq == std::string_view::npos)
            return base::fail(base::errc::invalid_argument, "a grant must be type=\"value\"");
        std::string_view type = trim(item.substr(0, eq)), v = trim(item.substr(eq + 1));
        if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
        if (v.empty()) return base::fail(base::errc::invalid_argument, "a grant names no grantee");
        if (base::iequals(type, "id")) {
            out.push_back(user_grant(std::string(v), p));
        } else if (base::iequals(type, "uri")) {
            auto kind = group_of(v);
            if (!kind) return base::fail(base::errc::invalid_argument, "Invalid group uri");
            out.push_back(group_grant(*kind, p));
        } else if (base::iequals(type, "emailAddress")) {
            return base::fail(base::errc::unresolvable_grant_by_email,
                              "The e-mail address you provided does not match any account on "
                              "record.");
        } else {
            return base::fail(base::errc::invalid_argument,
                              "a grantee is id=, uri= or emailAddress=");
        }
    }
    return {};
}

base::result<acl_grant> parse_grant_xml(const pugi::xml_node& grant) {
    pugi::xml_node grantee = grant.child("Grantee");
    auto permission = permission_of(xml_child_text(grant, "Permission"));
    if (!grantee || !permission)
        return base::fail(base::errc::malformed_acl,
                          "The XML you provided was not well-formed or did not validate against "
                          "our published schema");
    std::string type = grantee.attribute("xsi:type").value();
    if (grantee.child("EmailAddress") || type == "AmazonCustomerByEmail")
        return base::fail(base::errc::unresolvable_grant_by_email,
                          "The e-mail address you provided does not match any account on record.");
    if (grantee.child("URI") && (type.empty() || type == "Group")) {
        auto kind = group_of(xml_child_text(grantee, "URI"));
        if (!kind) return base::fail(base::errc::invalid_argument, "Invalid group uri");
        return group_grant(*kind, *permission);
    }
    std::string id = xml_child_text(grantee, "ID");
    if (id.empty() || !(type.empty() || type == "CanonicalUser"))
        return base::fail(base::errc::malformed_acl,
                          "The XML you provided was not well-formed or did not validate against "
                          "our published schema");
    return user_grant(id, *permission);
}

void grantee_xml(xml_writer& x, const acl_grant& g) {
    if (g.kind == grantee_kind::user) {
        x.open("Grantee", std::string(xsi) + " xsi:type=\"CanonicalUser\"");
        x.element("ID", g.id).element("DisplayName", g.id);
    } else {
        x.open("Grantee", std::string(xsi) + " xsi:type=\"Group\"");
        x.element("URI", uri_of(g.kind));
    }
    x.close("Grantee");
}

}  // namespace

std::optional<object_ownership> parse_ownership(std::string_view text) {
    if (text == "BucketOwnerEnforced") return object_ownership::enforced;
    if (text == "BucketOwnerPreferred") return object_ownership::preferred;
    if (text == "ObjectWriter") return object_ownership::writer;
    return std::nullopt;
}

std::string_view ownership_name(object_ownership o) {
    switch (o) {
        case object_ownership::enforced: return "BucketOwnerEnforced";
        case object_ownership::preferred: return "BucketOwnerPreferred";
        case object_ownership::writer: return "ObjectWriter";
    }
    return "BucketOwnerEnforced";
}

access_control_list owner_full_control(const std::string& owner) {
    return {owner, {user_grant(owner, acl_permission::full_control)}};
}

bool acl_permits(const access_control_list& acl, std::string_view who, acl_permission wanted) {
    if (!who.empty() && who == acl.owner &&
        (wanted == acl_permission::read_acp || wanted == acl_permission::write_acp))
        return true;
    for (const auto& g : acl.grants) {
        if (!covers(g.permission, wanted)) continue;
        if ((g.kind == grantee_kind::user && !who.empty() && g.id == who) ||
            g.kind == grantee_kind::all_users ||
            (g.kind == grantee_kind::authenticated_users && !who.empty()))
            return true;
    }
    return false;
}

bool grants_owner_only(const access_control_list& acl) {
    for (const auto& g : acl.grants)
        if (g.kind != grantee_kind::user || g.id != acl.owner) return false;
    return true;
}

std::string acl_xml(const access_control_list& acl) {
    xml_writer x;
    x.open("AccessControlPolicy", s3_xmlns);
    x.open("Owner").element("ID", acl.owner).element("DisplayName", acl.owner).close("Owner");
    x.open("AccessControlList");
    for (const auto& g : acl.grants) {
        x.open("Grant");
        grantee_xml(x, g);
        x.element("Permission", name_of(g.permission)).close("Grant");
    }
    x.close("AccessControlList").close("AccessControlPolicy");
    return x.take();
}

base::result<access_control_list> parse_acl_xml(std::string_view body) {
    pugi::xml_document doc;
    FJORD_TRY(load_request_xml(doc, body));
    pugi::xml_node policy = doc.child("AccessControlPolicy");
    pugi::xml_node list = policy.child("AccessControlList");
    if (!policy || !list)
        return base::fail(base::errc::malformed_acl,
                          "The XML you provided was not well-formed or did not validate against "
                          "our published schema");
    access_control_list acl;
    acl.owner = xml_child_text(policy.child("Owner"), "ID");
    for (pugi::xml_node grant : list.children("Grant")) {
        if (acl.grants.size() >= 100)  // S3's limit
            return base::fail(base::errc::malformed_acl, "An ACL holds at most 100 grants");
        auto g = parse_grant_xml(grant);
        if (!g) return g.as_failure();
        acl.grants.push_back(std::move(*g));
    }
    return acl;
}

base::result<std::optional<access_control_list>> acl_from_headers(const http::request_head& head,
                                                                  const std::string& owner,
                                                                  const std::string& bucket_owner) {
    static constexpr std::pair<std::string_view, acl_permission> grant_headers[] = {
        {"x-amz-grant-read", acl_permission::read},
        {"x-amz-grant-write", acl_permission::write},
        {"x-amz-grant-read-acp", acl_permission::read_acp},
        {"x-amz-grant-write-acp", acl_permission::write_acp},
        {"x-amz-grant-full-control", acl_permission::full_control}};
    access_control_list acl{owner, {}};
    bool granted = false;
    for (const auto& [name, permission] : grant_headers)
        for (const auto& h : head.headers)
            if (base::iequals(h.name, name)) {
                granted = true;
                FJORD_TRY(parse_grant_header(h.value, permission, acl.grants));
            }
    const http::header* canned = head.find("x-amz-acl");
    if (canned && granted)
        return base::fail(base::errc::invalid_request,
                          "Specifying both Canned ACLs and Header Grants is not allowed");
    if (canned) {
        auto made = canned_acl(trim(canned->value), owner, bucket_owner);
        if (!made) return made.as_failure();
        return std::optional<access_control_list>(std::move(*made));
    }
    if (!granted) return std::optional<access_control_list>{};
    if (acl.grants.size() > 100)
        return base::fail(base::errc::invalid_argument, "An ACL holds at most 100 grants");
    return std::optional<access_control_list>(std::move(acl));
}

std::string encode_acl(const access_control_list& acl) {
    std::string out = acl.owner;
    out += '\n';
    for (const auto& g : acl.grants) {
        out += std::to_string(static_cast<unsigned>(g.permission));
        out += ' ';
        out += static_cast<char>('0' + static_cast<int>(g.kind));
        out += ' ';
        out += g.id;
        out += '\n';
    }
    return out;
}

base::result<access_control_list> decode_acl(std::string_view text) {
    const base::failure bad = base::fail(base::errc::internal, "stored ACL does not decode");
    auto newline = text.find('\n');
    if (newline == std::string_view::npos) return bad;
    access_control_list acl;
    acl.owner = std::string(text.substr(0, newline));
    text.remove_prefix(newline + 1);
    while (!text.empty()) {
        newline = text.find('\n');
        if (newline == std::string_view::npos) return bad;
        std::string_view line = text.substr(0, newline);
        text.remove_prefix(newline + 1);
        auto space = line.find(' ');
        if (space == std::string_view::npos || line.size() < space + 3 || line[space + 2] != ' ')
            return bad;
        auto bits = base::parse_u64(line.substr(0, space));
        int kind = line[space + 1] - '0';
        std::string id(line.substr(space + 3));
        if (!bits || *bits > 15 || name_of(static_cast<acl_permission>(*bits)).empty() ||
            kind < 0 || kind > 3 || (kind == 0) == id.empty())
            return bad;
        acl.grants.push_back(
            {static_cast<grantee_kind>(kind), std::move(id), static_cast<acl_permission>(*bits)});
    }
    return acl;
}

}  // namespace fjord::s3

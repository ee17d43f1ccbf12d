// Access control lists, as S3 answers a bucket whose Object Ownership is BucketOwnerEnforced (S3's default
// for new buckets): ACLs are disabled. Reading one always shows the owner with FULL_CONTROL (the one
// account the credentials stand for owns every bucket and object); setting one, or sending an ACL with a
// write, is refused unless it grants nothing beyond that: 400 AccessControlListNotSupported (object writes,
// Put*Acl) or InvalidBucketAclWithObjectOwnership (CreateBucket). Grants to others, anonymous access and
// bucket policies come with users (docs/security.md).

#include <pugixml.hpp>

#include "base/encoding.h"
#include "s3/service_internal.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

constexpr std::string_view s3_xmlns = "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"";

// Checked on every write: compares in place, allocates nothing.
bool has_grant_header(const http::request_head& head) {
    constexpr std::string_view prefix = "x-amz-grant-";
    for (const auto& h : head.headers)
        if (h.name.size() >= prefix.size() &&
            base::iequals(h.name.substr(0, prefix.size()), prefix))
            return true;
    return false;
}

// The bucket, or the object, whose ACL is asked for: no_such_bucket / no_such_key when it is not there.
io::task<base::result<void>> acl_subject_exists(store::object_store& store, const s3_request& r,
                                                const std::optional<std::string>& version,
                                                bool object) {
    if (object && version) {
        auto found = co_await store.head_version(r.bucket, r.key, *version);
        if (!found) co_return found.as_failure();
    } else if (object) {
        auto found = co_await store.head(r.bucket, r.key);
        if (!found) co_return found.as_failure();
    } else if (!store.bucket_exists(r.bucket)) {
        co_return base::fail(base::errc::no_such_bucket, "The specified bucket does not exist");
    }
    co_return base::result<void>{};
}

std::string owner_only_policy(const std::string& owner) {
    xml_writer x;
    x.open("AccessControlPolicy", s3_xmlns);
    x.open("Owner").element("ID", owner).element("DisplayName", owner).close("Owner");
    x.open("AccessControlList").open("Grant");
    x.open("Grantee",
           "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"CanonicalUser\"");
    x.element("ID", owner).element("DisplayName", owner).close("Grantee");
    x.element("Permission", "FULL_CONTROL").close("Grant").close("AccessControlList");
    x.close("AccessControlPolicy");
    return x.take();
}

// An AccessControlPolicy document whose every grant names the owner (as s3cmd sends back the ACL it read
// when it copies an object): it grants nothing beyond the owner.
base::result<bool> grants_owner_only(std::string_view body, const std::string& owner) {
    pugi::xml_document doc;
    FJORD_TRY(load_request_xml(doc, body));
    pugi::xml_node list = doc.child("AccessControlPolicy").child("AccessControlList");
    if (!list) return base::fail(base::errc::malformed_xml, "expected AccessControlPolicy");
    for (pugi::xml_node grant : list.children("Grant")) {
        pugi::xml_node grantee = grant.child("Grantee");
        if (!grantee || xml_child_text(grantee, "ID") != owner || grantee.child("URI") ||
            grantee.child("EmailAddress"))
            return false;
    }
    return true;
}

const base::error acl_refused{base::errc::access_control_list_not_supported,
                              "The bucket does not allow ACLs"};

}  // namespace

base::result<void> check_write_acl(const http::request_head& head, bool creates_bucket) {
    std::string_view canned = head.value_of("x-amz-acl");
    if (creates_bucket) {
        std::string_view ownership = head.value_of("x-amz-object-ownership");
        if (!ownership.empty() && ownership != "BucketOwnerEnforced")
            return base::fail(base::errc::not_implemented,
                              "Fjord buckets are BucketOwnerEnforced: ACLs stay disabled");
        if ((canned.empty() || canned == "private") && !has_grant_header(head)) return {};
        return base::fail(base::errc::invalid_bucket_acl_with_object_ownership,
                          "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced "
                          "setting");
    }
    // S3 takes only bucket-owner-full-control here; `private` (which rclone sends by default) grants the
    // owner alone just the same, so it is taken too.
    if ((canned.empty() || canned == "private" || canned == "bucket-owner-full-control") &&
        !has_grant_header(head))
        return {};
    return base::fail(acl_refused);
}

io::task<void> service::get_acl(context& c, bool object) {
    if (auto exists = co_await acl_subject_exists(_store, c.req, c.version, object); !exists)
        co_return co_await send_error(c, exists.err());
    co_await send_xml(c, 200, owner_only_policy(c.auth.access_key));
}

// Only an ACL that grants the owner alone is accepted, as it changes nothing: a canned private or
// bucket-owner-full-control, or a document whose grants all name the owner; no grant headers.
io::task<void> service::put_acl(context& c, bool object) {
    std::string_view canned = c.ex.head().value_of("x-amz-acl");
    bool owner_only = !has_grant_header(c.ex.head());
    if (canned.empty()) {
        auto body = co_await read_verified_body(c, 64 * 1024);
        if (!body) co_return co_await send_error(c, body.err());
        auto only = grants_owner_only(*body, c.auth.access_key);
        if (!only) co_return co_await send_error(c, only.err());
        owner_only = owner_only && *only;
    } else {
        owner_only = owner_only && (canned == "private" || canned == "bucket-owner-full-control") &&
                     c.ex.body().declared_length().value_or(1) == 0;
    }
    if (!owner_only) co_return co_await send_error(c, acl_refused);
    if (auto exists = co_await acl_subject_exists(_store, c.req, c.version, object); !exists)
        co_return co_await send_error(c, exists.err());
    (void)co_await c.ex.send_all(200, c.common_headers(), "");
}

io::task<void> service::get_ownership_controls(context& c) {
    if (!_store.bucket_exists(c.req.bucket))
        co_return co_await send_error(
            c, {base::errc::no_such_bucket, "The specified bucket does not exist"});
    xml_writer x;
    x.open("OwnershipControls", s3_xmlns).open("Rule");
    x.element("ObjectOwnership", "BucketOwnerEnforced").close("Rule").close("OwnershipControls");
    co_await send_xml(c, 200, x.take());
}

}  // namespace fjord::s3

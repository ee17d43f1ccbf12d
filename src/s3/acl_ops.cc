// Access control lists and Object Ownership (acl.h): Get/Put Bucket/Object Acl, the ACL an object write
// or CreateBucket names, and Get/Put/DeleteBucketOwnershipControls.
//
// A BucketOwnerEnforced bucket (S3's default; Fjord's with --object-ownership BucketOwnerEnforced, in a
// cluster, and for KV buckets) answers as S3 does: reading an ACL shows the bucket owner
// with FULL_CONTROL; an ACL that grants anyone else is refused (AccessControlListNotSupported, or
// InvalidBucketAclWithObjectOwnership at CreateBucket), one that grants the owner alone is accepted and
// changes nothing. ObjectWriter and BucketOwnerPreferred buckets keep the ACLs they are given.

#include <pugixml.hpp>

#include "base/encoding.h"
#include "s3/operations.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

// Checked on every write: compares in place, allocates nothing.
bool has_grant_header(const http::request_head& head) {
    constexpr std::string_view prefix = "x-amz-grant-";
    for (const auto& h : head.headers)
        if (h.name.size() >= prefix.size() &&
            base::iequals(h.name.substr(0, prefix.size()), prefix))
            return true;
    return false;
}

bool head_names_acl(const http::request_head& head) {
    return head.find("x-amz-acl") != nullptr || has_grant_header(head);
}

const base::error acl_refused{base::errc::access_control_list_not_supported,
                              "The bucket does not allow ACLs"};

base::failure no_such_bucket() {
    return base::fail(base::errc::no_such_bucket, "The specified bucket does not exist");
}

// The ACL of an object whose bucket has ACLs enabled: its own, or its bucket owner's full control.
base::result<access_control_list> object_acl_of(const store::object_record& r,
                                                const std::string& bucket_owner) {
    if (r.acl.empty()) return owner_full_control(bucket_owner);
    return decode_acl(r.acl);
}

// How an ACL is stored: empty when it is the default one.
std::string stored_acl(const access_control_list& acl, const std::string& bucket_owner) {
    return acl == owner_full_control(bucket_owner) ? std::string() : encode_acl(acl);
}

// What a Put*Acl request asks for: a canned ACL or grant headers (built once the owner is known), or a
// document. Both is InvalidRequest, as is neither.
struct requested_acl {
    bool from_headers = false;
    access_control_list document;
};

// The ACL of a Put*Acl for something owned by `owner`: its document's Owner must be that owner.
base::result<access_control_list> acl_for(const requested_acl& wanted,
                                          const http::request_head& head, const std::string& owner,
                                          const std::string& bucket_owner) {
    if (wanted.from_headers) {
        auto made = acl_from_headers(head, owner, bucket_owner);
        if (!made) return made.as_failure();
        return std::move(**made);
    }
    access_control_list acl = wanted.document;
    if (acl.owner.empty()) acl.owner = owner;
    if (acl.owner != owner)
        return base::fail(base::errc::access_denied, "An ACL cannot change the owner");
    return acl;
}

}  // namespace

object_ownership ownership_of(const store::bucket_info& bucket) {
    auto it = bucket.attributes.find(ownership_attribute);
    if (it == bucket.attributes.end()) return object_ownership::enforced;
    if (it->second.empty()) return object_ownership::writer;  // controls deleted
    return parse_ownership(it->second).value_or(object_ownership::enforced);
}

base::result<void> object_acl_allows(const deferred_acl& d, const std::string& who,
                                     const store::object_record& record) {
    auto acl = object_acl_of(record, d.bucket_owner);
    if (acl && d.policy_allows && acl->owner == d.bucket_owner) return {};
    if (acl && acl_permits(*acl, who, d.wanted)) return {};
    return base::fail(base::errc::access_denied, "Access Denied");
}

std::string owner_id(const context& c, const store::bucket_info& bucket) {
    std::string owner = owner_of(bucket);
    return owner.empty() ? c.svc.users().root_id() : owner;
}

base::result<void> check_grantees(const context& c, const access_control_list& acl) {
    const auto& users = c.svc.users().local(c.svc.store());
    for (const auto& g : acl.grants)
        if (g.kind == grantee_kind::user && !users.find(g.id))
            return base::fail(base::errc::invalid_argument, "Invalid id");
    return {};
}

namespace {
// What a BucketOwnerEnforced bucket accepts: an ACL granting the owner alone.
base::result<void> check_enforced_write(const http::request_head& head, bool creates_bucket) {
    std::string_view canned = head.value_of("x-amz-acl");
    if (creates_bucket) {
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
}  // namespace

base::result<void> resolve_write_acl(context& c, const http::request_head& head,
                                     bool creates_bucket) {
    const bool root = c.svc.users().is_root(c.auth.access_key);
    if (creates_bucket) {
        std::string_view named = head.value_of("x-amz-object-ownership");
        auto ownership = named.empty() ? c.svc.options().default_ownership : parse_ownership(named);
        if (!ownership)
            return base::fail(base::errc::invalid_argument,
                              "Invalid x-amz-object-ownership header: " + std::string(named));
        // KV buckets keep no ACLs (create_owned_bucket): BucketOwnerEnforced whatever was asked.
        if (head.value_of("x-fjord-bucket-type") == "kv") ownership = object_ownership::enforced;
        // A bucket that exists is answered as such first (rclone sends its upload ACL with the
        // CreateBucket it makes before each upload, and takes BucketAlreadyOwnedByYou as success)
        if (!head_names_acl(head) || c.svc.store().bucket_exists(c.req.bucket)) return {};
        if (*ownership == object_ownership::enforced) return check_enforced_write(head, true);
        const std::string creator = root ? c.svc.users().root_id() : c.auth.access_key;
        auto acl = acl_from_headers(head, creator, creator);
        if (!acl) return acl.as_failure();
        return check_grantees(c, **acl);  // create_owned_bucket stores it
    }
    if (root && !head_names_acl(head)) return {};
    auto info = c.svc.store().find_bucket(c.req.bucket);
    if (!info) return {};  // the write answers NoSuchBucket
    const object_ownership ownership = ownership_of(*info);
    if (ownership == object_ownership::enforced) return check_enforced_write(head, false);
    // The writer owns what it writes, unless it is the bucket owner, root or anonymous, or the bucket
    // prefers to own objects given to it with bucket-owner-full-control.
    const std::string bucket_owner = owner_id(c, *info);
    const std::string& writer = c.auth.access_key;
    const bool to_bucket_owner = root || writer.empty() || writer == bucket_owner ||
                                 (ownership == object_ownership::preferred &&
                                  head.value_of("x-amz-acl") == "bucket-owner-full-control");
    const std::string object_owner = to_bucket_owner ? bucket_owner : writer;
    auto named = acl_from_headers(head, object_owner, bucket_owner);
    if (!named) return named.as_failure();
    access_control_list acl = *named ? std::move(**named) : owner_full_control(object_owner);
    FJORD_TRY(check_grantees(c, acl));
    c.write_acl = stored_acl(acl, bucket_owner);
    return {};
}

io::task<void> get_acl(context& c, bool object) {
    auto info = c.svc.store().find_bucket(c.req.bucket);
    if (!info) co_return co_await send_error(c, no_such_bucket().err);
    const std::string bucket_owner = owner_id(c, *info);
    const bool enforced = ownership_of(*info) == object_ownership::enforced;
    base::result<access_control_list> acl = owner_full_control(bucket_owner);
    if (object) {
        auto found = co_await head_named(c);
        if (!found) co_return co_await send_error(c, visible_error(c, found.err()));
        if (auto allowed = c.check_of_object()(*found); !allowed)
            co_return co_await send_error(c, allowed.err());
        if (!enforced) acl = object_acl_of(*found, bucket_owner);
    } else if (auto it = info->attributes.find(acl_attribute);
               !enforced && it != info->attributes.end()) {
        acl = decode_acl(it->second);
    }
    if (!acl) co_return co_await send_error(c, acl.err());
    co_await send_xml(c, 200, acl_xml(*acl));
}

io::task<void> put_acl(context& c, bool object) {
    const http::request_head& head = c.ex.head();
    requested_acl wanted;
    wanted.from_headers = head_names_acl(head);
    if (!wanted.from_headers || c.ex.body().declared_length().value_or(1) != 0) {
        auto body = co_await read_verified_body(c, 64 * 1024);
        if (!body) co_return co_await send_error(c, body.err());
        if (wanted.from_headers && !body->empty())
            co_return co_await send_error(
                c, {base::errc::invalid_request,
                    "Specifying both an ACL document and ACL headers is not allowed"});
        if (!wanted.from_headers) {
            auto document = parse_acl_xml(*body);
            if (!document) co_return co_await send_error(c, document.err());
            wanted.document = std::move(*document);
        }
    }
    auto info = c.svc.store().find_bucket(c.req.bucket);
    if (!info) co_return co_await send_error(c, no_such_bucket().err);
    const std::string bucket_owner = owner_id(c, *info);
    const bool enforced = ownership_of(*info) == object_ownership::enforced;
    // Checked before anything changes (the grantees a canned ACL adds are owners, who exist)
    base::result<access_control_list> probe = wanted.document;
    if (wanted.from_headers) probe = acl_for(wanted, head, bucket_owner, bucket_owner);
    if (!probe) co_return co_await send_error(c, probe.err());
    if (enforced) {
        probe->owner = bucket_owner;
        if (!grants_owner_only(*probe)) co_return co_await send_error(c, acl_refused);
    } else if (auto known = check_grantees(c, *probe); !known) {
        co_return co_await send_error(c, known.err());
    }
    if (!object) {
        if (!enforced) {
            auto acl = acl_for(wanted, head, bucket_owner, bucket_owner);
            if (!acl) co_return co_await send_error(c, acl.err());
            std::string stored = stored_acl(*acl, bucket_owner);  // the default: no attribute
            auto set = co_await set_bucket_attribute(
                c, c.req.bucket, acl_attribute,
                stored.empty() ? std::nullopt : std::optional<std::string>(std::move(stored)));
            if (!set) co_return co_await send_error(c, set.err());
        }
        co_return (void) co_await c.ex.send_all(200, c.common_headers(), "");
    }
    const object_check allowed = c.check_of_object();
    if (enforced) {  // nothing changes: the object only has to be there (and be the caller's to set)
        auto found = co_await head_named(c);
        if (!found) co_return co_await send_error(c, visible_error(c, found.err()));
        if (auto ok = allowed(*found); !ok) co_return co_await send_error(c, ok.err());
        co_return (void) co_await c.ex.send_all(200, c.common_headers(), "");
    }
    store::record_editor edit = [&](store::object_record& r) -> base::result<void> {
        FJORD_TRY(allowed(r));
        auto current = object_acl_of(r, bucket_owner);
        if (!current) return current.as_failure();
        auto acl = acl_for(wanted, head, current->owner, bucket_owner);
        if (!acl) return acl.as_failure();
        r.acl = stored_acl(*acl, bucket_owner);
        return {};
    };
    auto updated = co_await update_named(c, edit);
    if (!updated) co_return co_await send_error(c, visible_error(c, updated.err()));
    auto headers = c.common_headers();
    answer_version(headers, *updated, c);
    (void)co_await c.ex.send_all(200, headers, "");
}

io::task<void> get_ownership_controls(context& c) {
    auto info = c.svc.store().find_bucket(c.req.bucket);
    if (!info) co_return co_await send_error(c, no_such_bucket().err);
    if (auto it = info->attributes.find(ownership_attribute);
        it != info->attributes.end() && it->second.empty())
        co_return co_await send_error(c, {base::errc::ownership_controls_not_found,
                                          "The bucket ownership controls were not found"});
    xml_writer x;
    x.open("OwnershipControls", s3_xmlns).open("Rule");
    x.element("ObjectOwnership", ownership_name(ownership_of(*info)));
    x.close("Rule").close("OwnershipControls");
    co_await send_xml(c, 200, x.take());
}

namespace {
base::result<object_ownership> parse_ownership_controls(std::string_view body) {
    pugi::xml_document doc;
    FJORD_TRY(load_request_xml(doc, body));
    pugi::xml_node rules = doc.child("OwnershipControls");
    std::optional<object_ownership> chosen;
    std::size_t count = 0;
    for (pugi::xml_node rule : rules.children("Rule")) {
        ++count;
        chosen = parse_ownership(xml_child_text(rule, "ObjectOwnership"));
    }
    if (!rules || count != 1 || !chosen)
        return base::fail(base::errc::malformed_xml,
                          "OwnershipControls needs one Rule naming BucketOwnerEnforced, "
                          "BucketOwnerPreferred or ObjectWriter");
    return *chosen;
}
}  // namespace

// BucketOwnerEnforced is refused while the bucket's own ACL grants anyone but its owner, as S3 does.
io::task<void> put_ownership_controls(context& c) {
    auto body = co_await read_verified_body(c, 64 * 1024);
    if (!body) co_return co_await send_error(c, body.err());
    auto chosen = parse_ownership_controls(*body);
    if (!chosen) co_return co_await send_error(c, chosen.err());
    auto info = c.svc.store().find_bucket(c.req.bucket);
    if (!info) co_return co_await send_error(c, no_such_bucket().err);
    if (auto it = info->attributes.find(acl_attribute);
        *chosen == object_ownership::enforced && it != info->attributes.end()) {
        auto acl = decode_acl(it->second);
        if (!acl || !grants_owner_only(*acl))
            co_return co_await send_error(
                c, {base::errc::invalid_bucket_acl_with_object_ownership,
                    "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced "
                    "setting"});
    }
    auto set = co_await set_bucket_attribute(c, c.req.bucket, ownership_attribute,
                                             std::string(ownership_name(*chosen)));
    if (!set) co_return co_await send_error(c, set.err());
    (void)co_await c.ex.send_all(200, c.common_headers(), "");
}

// Without controls a bucket acts as ObjectWriter, as S3's buckets from before Object Ownership do.
io::task<void> delete_ownership_controls(context& c) {
    auto set = co_await set_bucket_attribute(c, c.req.bucket, ownership_attribute, "");
    if (!set) co_return co_await send_error(c, set.err());
    (void)co_await c.ex.send_all(204, c.common_headers(), "");
}

}  // namespace fjord::s3

#pragma once

// Access control lists (docs/security.md, "ACLs"): the model S3 has, and how a bucket's Object Ownership
// setting turns them on or off.
//
// A bucket's Object Ownership (its "ownership" attribute) is what its CreateBucket named (in
// x-amz-object-ownership, else the server's default, service_options::default_ownership) or what
// PutBucketOwnershipControls set; a bucket with no attribute is BucketOwnerEnforced: ACLs are then disabled
// (every object is the bucket owner's, only owner-only ACLs are accepted, none is consulted).
// With ObjectWriter or BucketOwnerPreferred, ACLs are enabled: the bucket's ACL is a bucket attribute, each
// object's is in its record (empty: the bucket owner's, with FULL_CONTROL only), and both grant access
// beside the owner's and the bucket policy's (check_access).
//
// Grantees are Fjord users by canonical ID (the access key), and the groups AllUsers (anyone, anonymous
// included), AuthenticatedUsers (any signed request) and LogDelivery. Grants by e-mail address are refused
// (UnresolvableGrantByEmailAddress): Fjord users have none.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "http/request.h"

namespace fjord::s3 {

// One permission, or FULL_CONTROL (all four).
enum class acl_permission : std::uint8_t {
    read = 1,
    write = 2,
    read_acp = 4,
    write_acp = 8,
    full_control = 15,
};

enum class grantee_kind : std::uint8_t { user, all_users, authenticated_users, log_delivery };

struct acl_grant {
    grantee_kind kind = grantee_kind::user;
    std::string id;  // the user's canonical ID (access key); empty for groups
    acl_permission permission = acl_permission::read;
    bool operator==(const acl_grant&) const = default;
};

struct access_control_list {
    std::string owner;  // canonical ID
    std::vector<acl_grant> grants;
    bool operator==(const access_control_list&) const = default;
};

enum class object_ownership : std::uint8_t { enforced, preferred, writer };

// The bucket attributes they are kept in.
inline constexpr const char* acl_attribute = "acl";
inline constexpr const char* ownership_attribute = "ownership";

// "BucketOwnerEnforced", "BucketOwnerPreferred", "ObjectWriter"; anything else is nullopt.
std::optional<object_ownership> parse_ownership(std::string_view text);
std::string_view ownership_name(object_ownership o);

// The default ACL: the owner with FULL_CONTROL (canned private).
access_control_list owner_full_control(const std::string& owner);

// Whether `who` (an access key; empty: anonymous) is granted `wanted` by the list. The owner always has
// READ_ACP and WRITE_ACP, as in S3; anything else only by a grant.
bool acl_permits(const access_control_list& acl, std::string_view who, acl_permission wanted);
// Whether the list grants nobody but its owner anything.
bool grants_owner_only(const access_control_list& acl);

// The AccessControlPolicy document of a list (Get*Acl).
std::string acl_xml(const access_control_list& acl);
// An AccessControlPolicy document (Put*Acl's body): XML that does not parse is malformed_xml, a document
// that is not an ACL (unknown permission, grantee type or group) malformed_acl, an e-mail grantee
// unresolvable_grant_by_email. The Owner it names is returned as sent (empty when it names none).
base::result<access_control_list> parse_acl_xml(std::string_view body);

// The ACL a request's headers name (x-amz-acl, or x-amz-grant-*), or nullopt when they name none.
// `owner` owns what the ACL is for; `bucket_owner` is the bucket's (for bucket-owner-read and
// bucket-owner-full-control). Both a canned ACL and grant headers: invalid_request, as S3.
base::result<std::optional<access_control_list>> acl_from_headers(const http::request_head& head,
                                                                  const std::string& owner,
                                                                  const std::string& bucket_owner);

// The stored form of a list (a bucket attribute, an object record's acl): one line for the owner, then
// one per grant ("<permission bits> <kind> <id>"). decode_acl refuses anything encode_acl cannot make.
std::string encode_acl(const access_control_list& acl);
base::result<access_control_list> decode_acl(std::string_view text);

}  // namespace fjord::s3

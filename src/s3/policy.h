#pragma once

// Bucket policies (Put/Get/DeleteBucketPolicy): the subset of IAM policy JSON that object-store users
// write. Statements with Effect Allow or Deny; Principal "*" (anyone, anonymous included) or {"AWS": ...}
// naming Fjord users by access key (also as "arn:aws:iam::<anything>:user/KEY" or ".../KEY"); Action s3:
// names with * and ? wildcards; Resource ARNs of this bucket ("arn:aws:s3:::bucket", ".../prefix*");
// Conditions IpAddress / NotIpAddress on aws:SourceIp (IPv4 and IPv6 CIDRs) and StringEquals /
// StringNotEquals / StringLike / StringNotLike (each also as ...IfExists, which holds when the request has
// no such value) on the request keys S3 defines for them (policy_string_keys: s3:prefix, s3:delimiter,
// s3:max-keys, s3:x-amz-acl, s3:x-amz-grant-*, s3:x-amz-copy-source, s3:x-amz-metadata-directive,
// aws:Referer, aws:UserAgent, ...), and s3:ExistingObjectTag/<tag> (the object's own tags).
// Anything else is MalformedPolicy, never silently ignored.
//
// Decision (check_access): root may do anything; an explicit Deny that matches refuses everyone
// else, the bucket's owner included; then the owner is allowed; then a matching Allow allows; otherwise
// refused (default deny). Parsed with nlohmann/json (a well-kept, header-only JSON library).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace fjord::s3 {

struct policy_condition {
    enum class kind {
        ip_address,
        not_ip_address,
        string_equals,
        string_not_equals,
        string_like,
        string_not_like
    };
    kind test = kind::ip_address;
    std::string key;  // "aws:sourceip", "s3:prefix", ... (lower case)
    std::vector<std::string> values;
    bool if_exists = false;  // ...IfExists: holds when the request has no value for the key
};

// The condition keys a string test may name, lower case: the request's values for them are
// policy_request::values (s3:prefix is policy_request::prefix).
inline constexpr std::string_view policy_string_keys[] = {"s3:prefix",
                                                          "s3:delimiter",
                                                          "s3:max-keys",
                                                          "s3:x-amz-acl",
                                                          "s3:x-amz-grant-read",
                                                          "s3:x-amz-grant-write",
                                                          "s3:x-amz-grant-read-acp",
                                                          "s3:x-amz-grant-write-acp",
                                                          "s3:x-amz-grant-full-control",
                                                          "s3:x-amz-copy-source",
                                                          "s3:x-amz-metadata-directive",
                                                          "s3:x-amz-server-side-encryption",
                                                          "s3:x-amz-storage-class",
                                                          "s3:versionid",
                                                          "s3:x-amz-content-sha256",
                                                          "aws:referer",
                                                          "aws:useragent"};

struct policy_statement {
    bool allow = true;
    std::vector<std::string> principals;  // "*" or access keys
    std::vector<std::string> actions;     // lower case, "s3:getobject", "s3:*"
    std::vector<std::string> resources;   // "bucket" or "bucket/key-pattern"
    std::vector<policy_condition> conditions;
};

// s3:ExistingObjectTag/<tag> (lower case up to the tag's name, which keeps its case): the value of that
// tag on the object the request acts on, known only once its record is read (service.h, decide).
inline constexpr std::string_view object_tag_condition_prefix = "s3:existingobjecttag/";

struct bucket_policy {
    std::vector<policy_statement> statements;
    bool uses_object_tags = false;  // a condition names s3:ExistingObjectTag/...
};

// A policy document for `bucket`: MalformedPolicy (with what is wrong) for anything outside the subset
// above, or a resource of another bucket.
base::result<bucket_policy> parse_policy(std::string_view json, const std::string& bucket);

// What a request is, as a policy sees it.
struct policy_request {
    std::string principal;              // access key; empty: anonymous
    std::string action;                 // "s3:GetObject"
    std::string resource;               // "bucket" or "bucket/key"
    std::string source_ip;              // the client's address, without port
    std::optional<std::string> prefix;  // ListBucket's prefix parameter
    // The request's values for the other policy_string_keys it has (key lower case)
    std::vector<std::pair<std::string, std::string>> values;
};

enum class policy_decision { none, allow, deny };
policy_decision evaluate(const bucket_policy& policy, const policy_request& request);

// The bucket attribute the policy is kept in (the JSON as sent).
inline constexpr const char* policy_attribute = "policy";

}  // namespace fjord::s3

#pragma once

// POST Object (browser-based upload): the form fields, its policy document and its signature.
// A form that carries credentials carries a policy, a base64 JSON document with an expiration and a
// list of conditions that every form field must meet; the signature is over that base64 text, with
// the Signature Version 4 signing key (x-amz-algorithm, x-amz-credential, x-amz-date,
// x-amz-signature) or, as older forms still send it, Signature Version 2 (AWSAccessKeyId and
// signature, base64 HMAC-SHA1 with the secret). Everything here is a pure function of its arguments.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "auth/sigv4.h"
#include "base/result.h"

namespace fjord::s3 {

// The fields of a POST form that come before its file, names lower-cased (S3 matches them without
// regard to case), values as sent.
struct post_form {
    std::vector<std::pair<std::string, std::string>> fields;
    // Returns nullptr when the form has no such field (`name` lower-case).
    const std::string* find(std::string_view name) const;
};

struct post_condition {
    enum class kind { eq, starts_with };
    kind op = kind::eq;
    std::string field;  // lower-case, without '$'
    std::string value;
};

struct post_policy {
    std::int64_t expiration_s = 0;  // Unix time
    std::vector<post_condition> conditions;
    // content-length-range, inclusive; the whole range when the policy names none
    std::uint64_t min_bytes = 0;
    std::optional<std::uint64_t> max_bytes;
};

// Parses the decoded policy document: InvalidPolicyDocument (400) when it is not JSON, lacks
// "expiration" (an ISO 8601 UTC time) or "conditions" (names matched with case), or holds a condition
// of a shape S3 does not know.
base::result<post_policy> parse_post_policy(std::string_view json);

// The form against its policy at `now_s`: AccessDenied (403) when the policy has expired, a condition
// fails, or a field (the bucket too, but not the signature fields, the policy, the file or x-ignore-*)
// is named by no condition.
base::result<void> check_post_policy(const post_policy& policy, const post_form& form,
                                     std::string_view bucket, std::int64_t now_s);

// Who signed the form, with its policy. nullopt: an anonymous form (no credentials, no policy).
// Errors: InvalidArgument (400) for a form missing one of the fields that go together,
// InvalidAccessKeyId or SignatureDoesNotMatch (403), and parse_post_policy's.
struct post_signer {
    std::string access_key;
    post_policy policy;
};
base::result<std::optional<post_signer>> verify_post_form(const post_form& form,
                                                          const auth::credential_store& credentials,
                                                          std::string_view region);

}  // namespace fjord::s3

#include "s3/post_policy.h"

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/digest.h"
#include "base/encoding.h"

namespace fjord::s3 {

namespace {

using json = nlohmann::json;

base::failure invalid_policy(std::string detail) {
    return base::fail(base::errc::invalid_policy_document, "Invalid Policy: " + std::move(detail));
}

base::failure policy_refuses(std::string detail) {
    return base::fail(base::errc::access_denied,
                      "Invalid according to Policy: " + std::move(detail));
}

base::failure missing_field(std::string_view name) {
    return base::fail(base::errc::invalid_argument,
                      "Bucket POST must contain a field named '" + std::string(name) +
                          "'. If it is specified, please check the order of the fields.");
}

// An ISO 8601 UTC time as policies give it: "2026-12-04T21:00:00Z" or with milliseconds.
std::optional<std::int64_t> parse_expiration(std::string_view text) {
    if ((text.size() != 20 && text.size() != 24) || text[4] != '-' || text[7] != '-' ||
        text[10] != 'T' || text[13] != ':' || text[16] != ':')
        return std::nullopt;
    if (text.size() == 24 && (text[19] != '.' || !base::parse_u64(text.substr(20, 3))))
        return std::nullopt;
    auto t = base::parse_http_date(text);
    if (!t) return std::nullopt;
    return static_cast<std::int64_t>(*t);
}

// A content-length-range bound: a non-negative integer, or a string of digits.
std::optional<std::uint64_t> length_bound(const json& v) {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
    if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return v.get<std::uint64_t>();
    if (v.is_string()) return base::parse_u64(v.get<std::string>());
    return std::nullopt;
}

base::result<void> add_array_condition(const json& c, post_policy& out) {
    if (c.empty() || !c[0].is_string()) return invalid_policy("Invalid Condition: " + c.dump());
    std::string op = base::to_lower(c[0].get<std::string>());
    if (op == "content-length-range") {
        std::optional<std::uint64_t> lo, hi;
        if (c.size() == 3) lo = length_bound(c[1]), hi = length_bound(c[2]);
        if (!lo || !hi || *lo > *hi)
            return invalid_policy("Invalid content-length-range: " + c.dump());
        out.min_bytes = *lo;
        out.max_bytes = *hi;
        return {};
    }
    if ((op != "eq" && op != "starts-with") || c.size() != 3 || !c[1].is_string() ||
        !c[2].is_string())
        return invalid_policy("Invalid Condition: " + c.dump());
    std::string field = c[1].get<std::string>();
    if (!field.starts_with('$'))
        return invalid_policy("Invalid Condition: the field must start with '$': " + c.dump());
    out.conditions.push_back(
        {op == "eq" ? post_condition::kind::eq : post_condition::kind::starts_with,
         base::to_lower(std::string_view(field).substr(1)), c[2].get<std::string>()});
    return {};
}

bool exempt(std::string_view name) {
    return name == "policy" || name == "signature" || name == "x-amz-signature" ||
           name == "awsaccesskeyid" || name == "file" || name.starts_with("x-ignore-");
}

bool meets(const post_condition& c, std::string_view value, std::string_view field) {
    if (c.op == post_condition::kind::eq) return value == c.value;
    if (field != "content-type") return value.starts_with(c.value);
    // Content-Type may list several types: each must start with the prefix
    for (;;) {
        std::size_t comma = value.find(',');
        if (!base::trim(value.substr(0, comma)).starts_with(c.value)) return false;
        if (comma == std::string_view::npos) return true;
        value.remove_prefix(comma + 1);
    }
}

std::string condition_text(const post_condition& c) {
    return json::array(
               {c.op == post_condition::kind::eq ? "eq" : "starts-with", "$" + c.field, c.value})
        .dump();
}

base::result<std::string> signer_secret(const auth::credential_store& credentials,
                                        std::string_view access_key) {
    const auth::credentials* found = credentials.find(access_key);
    if (!found)
        return base::fail(base::errc::invalid_access_key_id,
                          "The AWS Access Key Id you provided does not exist in our records.");
    return found->secret_key;
}

base::failure signature_mismatch() {
    return base::fail(base::errc::signature_does_not_match,
                      "The request signature we calculated does not match the signature you "
                      "provided. Check your key and signing method.");
}

// Signature Version 4: the hex HMAC-SHA256 of the base64 policy with the credential's signing key.
base::result<std::string> verify_v4(const post_form& form, const std::string& policy_b64,
                                    const auth::credential_store& credentials,
                                    std::string_view region) {
    for (std::string_view name :
         {"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature"})
        if (!form.find(name)) return missing_field(name);
    if (*form.find("x-amz-algorithm") != auth::sigv4_algorithm)
        return base::fail(base::errc::invalid_argument,
                          "x-amz-algorithm must be " + std::string(auth::sigv4_algorithm));
    std::vector<std::string_view> scope;
    std::string_view credential = *form.find("x-amz-credential");
    for (std::size_t at = 0;;) {
        std::size_t slash = credential.find('/', at);
        scope.push_back(credential.substr(at, slash - at));
        if (slash == std::string_view::npos) break;
        at = slash + 1;
    }
    const std::string& date = *form.find("x-amz-date");
    if (scope.size() != 5 || scope[1].size() != 8 || scope[3] != "s3" ||
        scope[4] != "aws4_request" || !base::parse_amz_date(date) || !date.starts_with(scope[1]))
        return base::fail(base::errc::invalid_argument, "malformed x-amz-credential or x-amz-date");
    if (!region.empty() && scope[2] != region)
        return base::fail(base::errc::wrong_region, "the region '" + std::string(scope[2]) +
                                                        "' is wrong; expecting '" +
                                                        std::string(region) + "'");
    auto secret = signer_secret(credentials, scope[0]);
    if (!secret) return secret.as_failure();
    std::string key = auth::derive_signing_key(*secret, scope[1], scope[2], "s3");
    std::string expected = base::hex_encode(base::hmac_sha256(key, policy_b64));
    if (!base::constant_time_equal(expected, base::to_lower(*form.find("x-amz-signature"))))
        return signature_mismatch();
    return std::string(scope[0]);
}

// Signature Version 2: the base64 HMAC-SHA1 of the base64 policy with the secret itself.
base::result<std::string> verify_v2(const post_form& form, const std::string& policy_b64,
                                    const auth::credential_store& credentials) {
    const std::string* access_key = form.find("awsaccesskeyid");
    if (!access_key) return missing_field("AWSAccessKeyId");
    const std::string* signature = form.find("signature");
    if (!signature) return missing_field("Signature");
    auto secret = signer_secret(credentials, *access_key);
    if (!secret) return secret.as_failure();
    std::string expected = base::base64_encode(base::hmac_sha1(*secret, policy_b64));
    if (!base::constant_time_equal(expected, *signature)) return signature_mismatch();
    return *access_key;
}

}  // namespace

const std::string* post_form::find(std::string_view name) const {
    for (const auto& [n, v] : fields)
        if (n == name) return &v;
    return nullptr;
}

base::result<post_policy> parse_post_policy(std::string_view text) {
    json doc = json::parse(text, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) return invalid_policy("the policy is not JSON");
    post_policy out;
    auto expiration = doc.find("expiration");
    if (expiration == doc.end() || !expiration->is_string())
        return invalid_policy("Policy missing expiration.");
    auto when = parse_expiration(expiration->get<std::string>());
    if (!when) return invalid_policy("Invalid 'expiration' value: " + expiration->dump());
    out.expiration_s = *when;
    auto conditions = doc.find("conditions");
    if (conditions == doc.end() || !conditions->is_array())
        return invalid_policy("Policy missing conditions.");
    for (const json& c : *conditions) {
        if (c.is_array()) {
            FJORD_TRY(add_array_condition(c, out));
        } else if (c.is_object() && c.size() == 1 && c.begin().value().is_string()) {
            out.conditions.push_back({post_condition::kind::eq, base::to_lower(c.begin().key()),
                                      c.begin().value().get<std::string>()});
        } else {
            return invalid_policy(
                "Invalid Simple-Condition: Simple-Conditions must have exactly one property "
                "specified, with a string value.");
        }
    }
    return out;
}

base::result<void> check_post_policy(const post_policy& policy, const post_form& form,
                                     std::string_view bucket, std::int64_t now_s) {
    if (now_s > policy.expiration_s) return policy_refuses("Policy expired.");
    for (const post_condition& c : policy.conditions) {
        const std::string* sent = form.find(c.field);
        std::string_view value = c.field == "bucket" ? bucket : sent ? std::string_view(*sent) : "";
        if (!meets(c, value, c.field))
            return policy_refuses("Policy Condition failed: " + condition_text(c));
    }
    auto named = [&](std::string_view field) {
        for (const post_condition& c : policy.conditions)
            if (c.field == field) return true;
        return false;
    };
    if (!named("bucket")) return policy_refuses("Extra input fields: bucket");
    for (const auto& [name, value] : form.fields)
        if (!exempt(name) && !named(name)) return policy_refuses("Extra input fields: " + name);
    return {};
}

base::result<std::optional<post_signer>> verify_post_form(const post_form& form,
                                                          const auth::credential_store& credentials,
                                                          std::string_view region) {
    const std::string* policy_b64 = form.find("policy");
    const bool v4 = form.find("x-amz-algorithm") || form.find("x-amz-credential") ||
                    form.find("x-amz-signature");
    const bool v2 = form.find("awsaccesskeyid") || form.find("signature");
    if (!policy_b64) {
        if (v4 || v2) return missing_field("policy");
        return std::optional<post_signer>{};
    }
    if (!v4 && !v2) return missing_field("AWSAccessKeyId");
    auto signer = v4 ? verify_v4(form, *policy_b64, credentials, region)
                     : verify_v2(form, *policy_b64, credentials);
    if (!signer) return signer.as_failure();
    auto decoded = base::base64_decode(*policy_b64);
    if (!decoded) return invalid_policy("Invalid Base64 Encoding");
    auto policy = parse_post_policy(*decoded);
    if (!policy) return policy.as_failure();
    return std::optional<post_signer>{post_signer{std::move(*signer), std::move(*policy)}};
}

}  // namespace fjord::s3

#include "s3/post_policy.h"

#include <gtest/gtest.h>

#include "base/digest.h"
#include "base/encoding.h"

namespace fjord::s3 {
namespace {

constexpr std::int64_t now = 1796000000;  // 2026-11-30
const std::string future = "2027-01-01T00:00:00Z";

base::errc parse_code(const std::string& json) {
    auto p = parse_post_policy(json);
    return p ? base::errc::ok : p.code();
}

TEST(PostPolicy, ParsesConditions) {
    auto p = parse_post_policy(R"({"expiration": "2027-01-01T00:00:00.000Z", "conditions": [
        {"bUcKeT": "b"}, ["StArTs-WiTh", "$KeY", "foo"], ["eq", "$acl", "private"],
        ["content-length-range", 1, "1024"]]})");
    ASSERT_TRUE(p) << p.err().message;
    EXPECT_EQ(p->expiration_s, 1798761600);
    ASSERT_EQ(p->conditions.size(), 3u);
    EXPECT_EQ(p->conditions[0].field, "bucket");
    EXPECT_EQ(p->conditions[1].op, post_condition::kind::starts_with);
    EXPECT_EQ(p->conditions[1].field, "key");
    EXPECT_EQ(p->conditions[2].value, "private");
    EXPECT_EQ(p->min_bytes, 1u);
    EXPECT_EQ(p->max_bytes.value_or(0), 1024u);
}

TEST(PostPolicy, RefusesMalformedDocuments) {
    const auto bad = base::errc::invalid_policy_document;
    EXPECT_EQ(parse_code("not json"), bad);
    EXPECT_EQ(parse_code("[]"), bad);
    EXPECT_EQ(parse_code(R"({"conditions": []})"), bad);
    EXPECT_EQ(parse_code(R"({"EXPIRATION": ")" + future + R"(", "conditions": []})"), bad);
    EXPECT_EQ(parse_code(R"({"expiration": ")" + future + R"("})"), bad);
    EXPECT_EQ(parse_code(R"({"expiration": ")" + future + R"(", "CONDITIONS": []})"), bad);
    EXPECT_EQ(parse_code(R"({"expiration": "2027-01-01 00:00:00+00:00", "conditions": []})"), bad);
    EXPECT_EQ(parse_code(R"({"expiration": 1798761600, "conditions": []})"), bad);
    for (std::string c :
         {R"({})", R"({"a": "1", "b": "2"})", R"({"a": 1})", R"(["eq", "$a"])",
          R"(["eq", "a", "1"])", R"(["lt", "$a", "1"])", R"(["content-length-range", 0])",
          R"(["content-length-range", -1, 0])", R"(["content-length-range", 5, 1])",
          R"(["content-length-range", 0.5, 1])", R"([])", R"("text")"})
        EXPECT_EQ(parse_code(R"({"expiration": ")" + future + R"(", "conditions": [)" + c + "]}"),
                  bad)
            << c;
    EXPECT_EQ(parse_code(R"({"expiration": ")" + future + R"(", "conditions": []})"),
              base::errc::ok);
}

post_form form_of(std::vector<std::pair<std::string, std::string>> fields) {
    return {std::move(fields)};
}

TEST(PostPolicy, ConditionsAndCoverage) {
    auto p = parse_post_policy(R"({"expiration": ")" + future + R"(", "conditions": [
        {"bucket": "b"}, ["starts-with", "$key", "foo"], ["starts-with", "$content-type", "text/"],
        ["eq", "$x-amz-meta-a", ""]]})");
    ASSERT_TRUE(p);
    auto check = [&](post_form f, std::string_view bucket = "b", std::int64_t at = now) {
        auto r = check_post_policy(*p, f, bucket, at);
        return r ? base::errc::ok : r.code();
    };
    const auto denied = base::errc::access_denied;
    EXPECT_EQ(check(form_of({{"key", "foo.txt"},
                             {"content-type", "text/plain, text/html"},
                             {"policy", "x"},
                             {"signature", "s"},
                             {"awsaccesskeyid", "a"},
                             {"x-ignore-me", "1"}})),
              base::errc::ok);
    EXPECT_EQ(check(form_of({{"key", "foo.txt"}}), "other"), denied);
    EXPECT_EQ(check(form_of({{"key", "bar.txt"}})), denied);
    EXPECT_EQ(check(form_of({{"key", "foo"}, {"content-type", "text/plain, image/png"}})), denied);
    EXPECT_EQ(check(form_of({{"key", "foo"}, {"x-amz-meta-a", "set"}})), denied);
    EXPECT_EQ(check(form_of({{"key", "foo"}, {"acl", "private"}})), denied);  // not in the policy
    EXPECT_EQ(check(form_of({{"key", "foo"}}), "b", 1798761601), denied);     // expired
    auto no_bucket = parse_post_policy(R"({"expiration": ")" + future + R"(", "conditions": [
        ["starts-with", "$key", ""]]})");
    ASSERT_TRUE(no_bucket);
    EXPECT_EQ(check_post_policy(*no_bucket, form_of({{"key", "k"}}), "b", now).code(), denied);
}

TEST(PostPolicy, Signatures) {
    auth::credential_store creds;
    creds.add({"AKID", "secret-key-1234"});
    std::string policy_b64 = base::base64_encode(R"({"expiration": ")" + future +
                                                 R"(", "conditions": [{"bucket": "b"}]})");
    auto verify = [&](post_form f) {
        auto r = verify_post_form(f, creds, "us-east-1");
        return r ? base::errc::ok : r.code();
    };
    std::string v2 = base::base64_encode(base::hmac_sha1("secret-key-1234", policy_b64));
    auto signed_v2 = verify_post_form(
        form_of({{"awsaccesskeyid", "AKID"}, {"signature", v2}, {"policy", policy_b64}}), creds,
        "us-east-1");
    ASSERT_TRUE(signed_v2) << signed_v2.err().message;
    ASSERT_TRUE(*signed_v2);
    EXPECT_EQ((*signed_v2)->access_key, "AKID");
    EXPECT_EQ(verify(form_of(
                  {{"awsaccesskeyid", "AKID"}, {"signature", v2 + "x"}, {"policy", policy_b64}})),
              base::errc::signature_does_not_match);
    EXPECT_EQ(
        verify(form_of({{"awsaccesskeyid", "DIKA"}, {"signature", v2}, {"policy", policy_b64}})),
        base::errc::invalid_access_key_id);
    EXPECT_EQ(verify(form_of({{"awsaccesskeyid", "AKID"}, {"policy", policy_b64}})),
              base::errc::invalid_argument);
    EXPECT_EQ(verify(form_of({{"policy", policy_b64}})), base::errc::invalid_argument);
    EXPECT_EQ(verify(form_of({{"awsaccesskeyid", "AKID"}, {"signature", v2}})),
              base::errc::invalid_argument);
    auto anonymous = verify_post_form(form_of({{"key", "k"}}), creds, "us-east-1");
    ASSERT_TRUE(anonymous);
    EXPECT_FALSE(*anonymous);

    std::string key = auth::derive_signing_key("secret-key-1234", "20261130", "us-east-1", "s3");
    std::string v4 = base::hex_encode(base::hmac_sha256(key, policy_b64));
    auto v4_form = [&](std::string credential, std::string signature) {
        return form_of({{"x-amz-algorithm", "AWS4-HMAC-SHA256"},
                        {"x-amz-credential", credential},
                        {"x-amz-date", "20261130T000000Z"},
                        {"x-amz-signature", signature},
                        {"policy", policy_b64}});
    };
    EXPECT_EQ(verify(v4_form("AKID/20261130/us-east-1/s3/aws4_request", v4)), base::errc::ok);
    EXPECT_EQ(verify(v4_form("AKID/20261130/us-east-1/s3/aws4_request", std::string(64, '0'))),
              base::errc::signature_does_not_match);
    EXPECT_EQ(verify(v4_form("AKID/20261130/eu-west-1/s3/aws4_request", v4)),
              base::errc::wrong_region);
    EXPECT_EQ(verify(v4_form("AKID/20261130/us-east-1/s3", v4)), base::errc::invalid_argument);
    EXPECT_EQ(verify(v4_form("AKID/20261201/us-east-1/s3/aws4_request", v4)),
              base::errc::invalid_argument);  // the date and the credential's day differ
    // A signature over a policy that is not base64 JSON
    std::string garbage = "bm90IGpzb24=";  // "not json"
    std::string v2_garbage = base::base64_encode(base::hmac_sha1("secret-key-1234", garbage));
    EXPECT_EQ(verify(form_of(
                  {{"awsaccesskeyid", "AKID"}, {"signature", v2_garbage}, {"policy", garbage}})),
              base::errc::invalid_policy_document);
}

}  // namespace
}  // namespace fjord::s3

// Bucket policies (s3/policy.h): what parses, what is refused, and each decision.

#include "s3/policy.h"

#include <gtest/gtest.h>

#include <string>

namespace fjord::s3 {
namespace {

std::string doc(const std::string& statements) {
    return R"({"Version": "2012-10-17", "Statement": [)" + statements + "]}";
}

bucket_policy parsed(const std::string& statements) {
    auto p = parse_policy(doc(statements), "b");
    EXPECT_TRUE(p.has_value()) << (p ? "" : p.err().message);
    return p ? *p : bucket_policy{};
}

policy_request req(std::string principal, std::string action, std::string resource,
                   std::string ip = "127.0.0.1") {
    return {std::move(principal), std::move(action), std::move(resource), std::move(ip), {}};
}

TEST(policy, refuses_what_it_cannot_honour) {
    const char* refused[] = {
        R"({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::other/*"})",
        R"({"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:user/*"}, "Action": "s3:*", "Resource": "arn:aws:s3:::b"})",
        R"({"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:root"}, "Action": "s3:*", "Resource": "arn:aws:s3:::b"})",
        R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::b", "Conditions": {}})",
        R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::b",
            "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/x"}}})",
        R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::b",
            "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/33"}}})",
        R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::b", "Condition": {}})",
        R"({"Effect": "Allow", "NotPrincipal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::b"})",
    };
    for (const char* s : refused) {
        auto p = parse_policy(doc(s), "b");
        ASSERT_FALSE(p.has_value()) << s;
        EXPECT_EQ(p.code(), base::errc::malformed_policy) << s;
    }
    EXPECT_FALSE(parse_policy("[1, 2]", "b"));
    EXPECT_FALSE(parse_policy(R"({"Statement": [], "Extra": 1})", "b"));
}

TEST(policy, a_key_named_twice_in_any_object_is_malformed) {
    const char* refused[] = {
        R"({"Effect": "Deny", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"})",
        R"({"Effect": "Deny", "Eff\u0065ct": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"})",
        R"({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*",
            "Condition": {"StringEquals": {"s3:prefix": "a", "s3:prefix": "b"}}})",
        R"({"Effect": "Allow", "Principal": {"AWS": "alice", "AWS": "*"}, "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"})",
    };
    for (const char* s : refused) {
        auto p = parse_policy(doc(s), "b");
        ASSERT_FALSE(p.has_value()) << s;
        EXPECT_EQ(p.code(), base::errc::malformed_policy) << s;
    }
    EXPECT_FALSE(parse_policy(
        R"({"Version": "2012-10-17", "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}]})",
        "b"));
    // The same key in two different objects is no repetition
    parsed(
        R"({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"},
              {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/x",
               "Condition": {"StringEquals": {"s3:prefix": "a"}, "StringLike": {"s3:prefix": "b*"}}})");
}

TEST(policy, deny_wins_and_wildcards_match_keys_holding_wildcards) {
    auto p = parsed(
        R"({"Effect": "Allow", "Principal": "*", "Action": "s3:Get*", "Resource": "arn:aws:s3:::b/*"},
                       {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/secret/*"})");
    EXPECT_EQ(evaluate(p, req("", "s3:GetObject", "b/public/x")), policy_decision::allow);
    EXPECT_EQ(evaluate(p, req("", "s3:GetObject", "b/secret/x")), policy_decision::deny);
    EXPECT_EQ(evaluate(p, req("", "s3:GetObject", "b/secret/*x")), policy_decision::deny)
        << "a '*' in the key is not a way around the pattern";
    EXPECT_EQ(evaluate(p, req("", "s3:GetObject", "b/secret/**")), policy_decision::deny);
    EXPECT_EQ(evaluate(p, req("", "s3:PutObject", "b/public/x")), policy_decision::none);
    EXPECT_EQ(evaluate(p, req("", "S3:GETOBJECT", "b/public/x")), policy_decision::allow)
        << "actions are case-insensitive";
}

TEST(policy, principals_name_users_by_access_key) {
    auto p = parsed(
        R"({"Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam::123:user/BOBKEY", "CAROLKEY"]},
                        "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"})");
    EXPECT_EQ(evaluate(p, req("BOBKEY", "s3:GetObject", "b/k")), policy_decision::allow);
    EXPECT_EQ(evaluate(p, req("CAROLKEY", "s3:GetObject", "b/k")), policy_decision::allow);
    EXPECT_EQ(evaluate(p, req("", "s3:GetObject", "b/k")), policy_decision::none);
    EXPECT_EQ(evaluate(p, req("MALLORY", "s3:GetObject", "b/k")), policy_decision::none);
}

TEST(policy, source_ip_counts_ipv4_mapped_peers_as_ipv4) {
    auto p = parsed(
        R"({"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::b/*",
                        "Condition": {"IpAddress": {"aws:SourceIp": ["203.0.113.0/24", "2001:db8::/32"]}}})");
    EXPECT_EQ(evaluate(p, req("", "s3:GetObject", "b/k", "203.0.113.5")), policy_decision::deny);
    EXPECT_EQ(evaluate(p, req("", "s3:GetObject", "b/k", "::ffff:203.0.113.5")),
              policy_decision::deny);
    EXPECT_EQ(evaluate(p, req("", "s3:GetObject", "b/k", "2001:db8::7")), policy_decision::deny);
    EXPECT_EQ(evaluate(p, req("", "s3:GetObject", "b/k", "198.51.100.1")), policy_decision::none);
}

TEST(policy, prefix_conditions_when_the_prefix_is_absent) {
    auto p = parsed(
        R"({"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::b",
                        "Condition": {"StringLike": {"s3:prefix": "shared/*"}}})");
    auto r = req("", "s3:ListBucket", "b");
    EXPECT_EQ(evaluate(p, r), policy_decision::none) << "no prefix matches no value";
    r.prefix = "shared/run-1/";
    EXPECT_EQ(evaluate(p, r), policy_decision::allow);
    r.prefix = "private/";
    EXPECT_EQ(evaluate(p, r), policy_decision::none);
}

TEST(policy, a_resource_pattern_covering_the_bucket_is_taken) {
    auto p = parsed(
        R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": ["arn:aws:s3:::*", "arn:aws:s3:::*/*"]})");
    EXPECT_EQ(evaluate(p, req("", "s3:ListBucket", "b")), policy_decision::allow);
    EXPECT_EQ(evaluate(p, req("", "s3:GetObject", "b/k/x")), policy_decision::allow);
    EXPECT_TRUE(parse_policy(doc(R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*",
                                     "Resource": "arn:aws:s3:::?/*"})"),
                             "b")
                    .has_value());
    EXPECT_EQ(parse_policy(doc(R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*",
                                   "Resource": "arn:aws:s3:::other*"})"),
                           "b")
                  .code(),
              base::errc::malformed_policy);
}

TEST(policy, a_bare_star_action_and_a_referer_condition) {
    auto every = parsed(
        R"({"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "arn:aws:s3:::b/*"})");
    EXPECT_EQ(evaluate(every, req("", "s3:PutObject", "b/k")), policy_decision::allow);
    auto referred = parsed(R"({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::b/*", "Condition": {"StringLikeIfExists": {"aws:Referer": "https://ok/*"}}})");
    auto r = req("", "s3:GetObject", "b/k");
    EXPECT_EQ(evaluate(referred, r), policy_decision::allow);
    r.values = {{"aws:referer", "https://evil/x"}};
    EXPECT_EQ(evaluate(referred, r), policy_decision::none);
    r.values = {{"aws:referer", "https://ok/page"}};
    EXPECT_EQ(evaluate(referred, r), policy_decision::allow);
}

TEST(policy, request_header_conditions_and_if_exists) {
    auto p = parsed(
        R"({"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::b/*",
                        "Condition": {"StringNotEquals": {"s3:x-amz-acl": "bucket-owner-full-control"}}},
           {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::b",
                        "Condition": {"StringEqualsIfExists": {"s3:max-keys": "10"}}})");
    auto put = req("alice", "s3:PutObject", "b/k");
    EXPECT_EQ(evaluate(p, put), policy_decision::deny) << "no x-amz-acl: not the one required";
    put.values = {{"s3:x-amz-acl", "public-read"}};
    EXPECT_EQ(evaluate(p, put), policy_decision::deny);
    put.values = {{"s3:x-amz-acl", "bucket-owner-full-control"}};
    EXPECT_EQ(evaluate(p, put), policy_decision::none);
    auto list = req("", "s3:ListBucket", "b");
    EXPECT_EQ(evaluate(p, list), policy_decision::allow) << "IfExists holds without the key";
    list.values = {{"s3:max-keys", "1000"}};
    EXPECT_EQ(evaluate(p, list), policy_decision::none);
    list.values = {{"s3:max-keys", "10"}};
    EXPECT_EQ(evaluate(p, list), policy_decision::allow);
    for (const char* bad : {"IpAddressIfExists", "StringEqualsIfExist", "IfExists"}) {
        auto refused =
            parse_policy(doc(std::string(R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*",
            "Resource": "arn:aws:s3:::b", "Condition": {")") +
                             bad + R"(": {"s3:prefix": "a"}}})"),
                         "b");
        EXPECT_EQ(refused.code(), base::errc::malformed_policy) << bad;
    }
    auto unknown = parse_policy(doc(R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*",
            "Resource": "arn:aws:s3:::b", "Condition": {"StringEquals": {"s3:ExistingObjectTagX": "a"}}})"),
                                "b");
    EXPECT_EQ(unknown.code(), base::errc::malformed_policy);
}

TEST(Policy, ExistingObjectTagConditions) {
    auto p = parse_policy(doc(R"({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::b/*", "Condition": {"StringEquals": {"s3:ExistingObjectTag/Security": "public"}}})"),
                          "b");
    ASSERT_TRUE(p) << p.err().message;
    EXPECT_TRUE(p->uses_object_tags);
    auto get = req("", "s3:GetObject", "b/k");
    EXPECT_EQ(evaluate(*p, get), policy_decision::none) << "an object without the tag";
    get.values = {{"s3:existingobjecttag/Security", "public"}};
    EXPECT_EQ(evaluate(*p, get), policy_decision::allow);
    get.values = {{"s3:existingobjecttag/security", "public"}};
    EXPECT_EQ(evaluate(*p, get), policy_decision::none) << "tag names keep their case";
    get.values = {{"s3:existingobjecttag/Security", "private"}};
    EXPECT_EQ(evaluate(*p, get), policy_decision::none);
    EXPECT_FALSE(parse_policy(doc(R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*",
            "Resource": "arn:aws:s3:::b", "Condition": {"StringLike": {"s3:prefix": "a"}}})"),
                              "b")
                     ->uses_object_tags);
    for (std::string bad :
         {std::string("s3:ExistingObjectTag/"), "s3:ExistingObjectTag/" + std::string(129, 'k')}) {
        auto refused = parse_policy(doc(R"({"Effect": "Allow", "Principal": "*", "Action": "s3:*",
            "Resource": "arn:aws:s3:::b", "Condition": {"StringEquals": {")" +
                                        bad + R"(": "a"}}})"),
                                    "b");
        EXPECT_EQ(refused.code(), base::errc::malformed_policy) << bad;
    }
}

}  // namespace
}  // namespace fjord::s3

#include "s3/policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <nlohmann/json.hpp>

#include "base/encoding.h"

namespace fjord::s3 {

namespace {
using json = nlohmann::json;
constexpr std::size_t max_statements = 100;

base::failure malformed(std::string what) {
    return base::fail(base::errc::malformed_policy, std::move(what));
}

// A string or an array of strings.
base::result<std::vector<std::string>> strings_of(const json& v, const char* what) {
    std::vector<std::string> out;
    if (v.is_string()) {
        out.push_back(v.get<std::string>());
    } else if (v.is_array() && !v.empty()) {
        for (const auto& item : v) {
            if (!item.is_string()) return malformed(std::string(what) + " must hold strings");
            out.push_back(item.get<std::string>());
        }
    } else {
        return malformed(std::string(what) + " must be a string or a list of strings");
    }
    return out;
}

// "*" (or {"AWS": "*"}), or Fjord users: an access key, as itself or as arn:aws:iam::ACCOUNT:user/KEY.
base::result<std::vector<std::string>> principals_of(const json& p) {
    if (p.is_string() && p.get<std::string>() == "*") return std::vector<std::string>{"*"};
    if (!p.is_object() || p.size() != 1 || !p.contains("AWS"))
        return malformed("Principal must be \"*\" or {\"AWS\": ...}");
    auto names = strings_of(p["AWS"], "Principal AWS");
    if (!names) return names;
    for (auto& n : *names) {
        if (n == "*") continue;
        if (n.starts_with("arn:aws:iam::")) {
            auto user = n.find(":user/");
            if (user == std::string::npos) return malformed("Invalid principal in policy: " + n);
            n = n.substr(user + 6);
        }
        // An access key: 3-128 visible characters, no wildcard or separator
        if (n.size() < 3 || n.size() > 128 || n.find_first_of("*?/: ") != std::string::npos)
            return malformed("Invalid principal in policy");
    }
    return names;
}

bool glob(std::string_view pattern, std::string_view text);

base::result<std::vector<std::string>> resources_of(const json& r, const std::string& bucket) {
    auto arns = strings_of(r, "Resource");
    if (!arns) return arns;
    constexpr std::string_view prefix = "arn:aws:s3:::";
    for (auto& arn : *arns) {
        // Patterns are matched against every request: bounded, and with few wildcards
        if (!arn.starts_with(prefix) || arn.size() > 1100 ||
            std::count(arn.begin(), arn.end(), '*') > 8)
            return malformed("Policy has invalid resource");
        arn = arn.substr(prefix.size());
        // This bucket, or a pattern that covers it ("arn:aws:s3:::*", as policies copied between
        // buckets use): the pattern is then matched as written, against this bucket's names only
        std::string_view named = std::string_view(arn).substr(0, arn.find('/'));
        const bool pattern = named.find_first_of("*?") != std::string_view::npos;
        if (named != bucket && !(pattern && glob(named, bucket)))
            return malformed("Policy has invalid resource");
    }
    return arns;
}

// A CIDR ("10.0.0.0/8", "::1/128", or a bare address): its family, network bytes and prefix length.
struct cidr_parts {
    int family = AF_INET;
    std::array<unsigned char, 16> net{};
    unsigned bits = 0;
};

std::optional<cidr_parts> parse_cidr(std::string_view cidr) {
    cidr_parts out;
    std::string net(cidr.substr(0, cidr.find('/')));
    out.family = net.find(':') != std::string::npos ? AF_INET6 : AF_INET;
    if (inet_pton(out.family, net.c_str(), out.net.data()) != 1) return std::nullopt;
    const unsigned total = out.family == AF_INET6 ? 128 : 32;
    out.bits = total;
    if (auto slash = cidr.find('/'); slash != std::string_view::npos) {
        auto n = base::parse_u64(cidr.substr(slash + 1));
        if (!n || *n > total) return std::nullopt;
        out.bits = static_cast<unsigned>(*n);
    }
    return out;
}

bool valid_cidr(std::string_view cidr) { return parse_cidr(cidr).has_value(); }

// Whether an address (an IPv4-mapped IPv6 one counts as its IPv4 address) is within a CIDR.
bool in_cidr(std::string address, std::string_view cidr) {
    if (address.starts_with("::ffff:") && address.find('.') != std::string::npos)
        address.erase(0, 7);
    auto range = parse_cidr(cidr);
    std::array<unsigned char, 16> a{};
    if (!range || inet_pton(range->family, address.c_str(), a.data()) != 1) return false;
    for (unsigned i = 0; i < range->bits; ++i) {
        const unsigned byte = i / 8, mask = 0x80u >> (i % 8);
        if ((a[byte] & mask) != (range->net[byte] & mask)) return false;
    }
    return true;
}

base::result<std::vector<policy_condition>> conditions_of(const json& c) {
    static const std::pair<const char*, policy_condition::kind> tests[] = {
        {"IpAddress", policy_condition::kind::ip_address},
        {"NotIpAddress", policy_condition::kind::not_ip_address},
        {"StringEquals", policy_condition::kind::string_equals},
        {"StringNotEquals", policy_condition::kind::string_not_equals},
        {"StringLike", policy_condition::kind::string_like},
        {"StringNotLike", policy_condition::kind::string_not_like}};
    if (!c.is_object() || c.empty()) return malformed("Condition must be a non-empty object");
    std::vector<policy_condition> out;
    for (const auto& item : c.items()) {
        const std::string name = item.key();
        const json& keys = item.value();
        constexpr std::string_view if_exists = "IfExists";
        const bool optional = name.size() > if_exists.size() && name.ends_with(if_exists) &&
                              name.starts_with("String");
        const std::string base_name =
            optional ? name.substr(0, name.size() - if_exists.size()) : name;
        auto test = std::find_if(std::begin(tests), std::end(tests),
                                 [&](const auto& t) { return base_name == t.first; });
        if (test == std::end(tests) || !keys.is_object() || keys.empty())
            return malformed("Unsupported condition operator " + name);
        for (const auto& entry : keys.items()) {
            const std::string key = entry.key();
            const json& values = entry.value();
            std::string lower = base::to_lower(key);
            const bool ip = test->second == policy_condition::kind::ip_address ||
                            test->second == policy_condition::kind::not_ip_address;
            bool string_key =
                std::find(std::begin(policy_string_keys), std::end(policy_string_keys), lower) !=
                std::end(policy_string_keys);
            // s3:ExistingObjectTag/<tag>: the tag's name keeps its case (tag keys are case-sensitive)
            constexpr std::string_view tag_key = object_tag_condition_prefix;
            if (lower.starts_with(tag_key)) {
                const std::size_t tag_bytes = key.size() - tag_key.size();
                if (tag_bytes == 0 || tag_bytes > 128)
                    return malformed("Invalid condition key " + key);
                lower = std::string(tag_key) + key.substr(tag_key.size());
                string_key = true;
            }
            if ((ip && lower != "aws:sourceip") || (!ip && !string_key))
                return malformed("Unsupported condition key " + key + " for " + name);
            auto list = strings_of(values, "a condition's values");
            if (!list) return list.as_failure();
            for (const auto& v : *list)
                if ((ip && !valid_cidr(v)) || v.size() > 1024)
                    return malformed("Invalid value in condition " + name + ": " + v);
            out.push_back({test->second, lower, std::move(*list), optional});
        }
    }
    return out;
}

base::result<policy_statement> statement_of(const json& s, const std::string& bucket) {
    if (!s.is_object()) return malformed("a Statement must be an object");
    static constexpr std::string_view known[] = {"Sid",          "Effect",    "Principal",
                                                 "Action",       "Resource",  "Condition",
                                                 "NotPrincipal", "NotAction", "NotResource"};
    for (const auto& field : s.items())
        if (std::find(std::begin(known), std::end(known), field.key()) == std::end(known))
            return malformed("Unknown field " + field.key());
    for (const char* unsupported : {"NotPrincipal", "NotAction", "NotResource"})
        if (s.contains(unsupported))
            return malformed(std::string(unsupported) + " is not supported");
    policy_statement st;
    if (!s.contains("Effect") || !s["Effect"].is_string() ||
        (s["Effect"] != "Allow" && s["Effect"] != "Deny"))
        return malformed("Effect must be Allow or Deny");
    st.allow = s["Effect"] == "Allow";
    for (const char* required : {"Principal", "Action", "Resource"})
        if (!s.contains(required))
            return malformed(std::string("Missing required field ") + required);
    auto principals = principals_of(s["Principal"]);
    if (!principals) return principals.as_failure();
    st.principals = std::move(*principals);
    auto actions = strings_of(s["Action"], "Action");
    if (!actions) return actions.as_failure();
    for (auto& a : *actions) {
        a = base::to_lower(a);
        if (a == "*") a = "s3:*";  // every action: an S3 bucket's policy names only S3's
        if (!a.starts_with("s3:")) return malformed("Policy has an invalid action");
    }
    st.actions = std::move(*actions);
    auto resources = resources_of(s["Resource"], bucket);
    if (!resources) return resources.as_failure();
    st.resources = std::move(*resources);
    if (s.contains("Condition")) {
        auto conditions = conditions_of(s["Condition"]);
        if (!conditions) return conditions.as_failure();
        st.conditions = std::move(*conditions);
    }
    return st;
}

// Glob match with * (any run) and ? (one character).
bool glob(std::string_view pattern, std::string_view text) {
    std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
    while (t < text.size()) {
        if (p < pattern.size() &&
            pattern[p] == '*') {  // before the literal test: a key may hold '*'
            star = p++;
            mark = t;
        } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
            ++p;
            ++t;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            t = ++mark;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}

bool condition_holds(const policy_condition& c, const policy_request& r) {
    using kind = policy_condition::kind;
    auto any = [&](auto&& pred) { return std::any_of(c.values.begin(), c.values.end(), pred); };
    switch (c.test) {
        case kind::ip_address:
            return any([&](const std::string& v) { return in_cidr(r.source_ip, v); });
        case kind::not_ip_address:
            return !any([&](const std::string& v) { return in_cidr(r.source_ip, v); });
        default: break;
    }
    // A key absent from the request matches no value (so a Not test holds), unless ...IfExists
    const bool negated = c.test == kind::string_not_equals || c.test == kind::string_not_like;
    const std::string* value = c.key == "s3:prefix" && r.prefix ? &*r.prefix : nullptr;
    for (const auto& [key, v] : r.values)
        if (!value && key == c.key) value = &v;
    if (!value) return c.if_exists || negated;
    const bool like = c.test == kind::string_like || c.test == kind::string_not_like;
    const bool matched =
        any([&](const std::string& v) { return like ? glob(v, *value) : v == *value; });
    return negated ? !matched : matched;
}

bool statement_matches(const policy_statement& s, const policy_request& r,
                       const std::string& action) {
    auto principal = [&](const std::string& p) {
        return p == "*" || (!r.principal.empty() && p == r.principal);
    };
    if (!std::any_of(s.principals.begin(), s.principals.end(), principal)) return false;
    if (!std::any_of(s.actions.begin(), s.actions.end(),
                     [&](const std::string& a) { return glob(a, action); }))
        return false;
    if (!std::any_of(s.resources.begin(), s.resources.end(),
                     [&](const std::string& res) { return glob(res, r.resource); }))
        return false;
    return std::all_of(s.conditions.begin(), s.conditions.end(),
                       [&](const policy_condition& c) { return condition_holds(c, r); });
}
}  // namespace

namespace {
// Parses a policy document, refusing one in which an object names a key twice: JSON leaves its meaning
// open and parsers differ ({"Effect":"Deny","Effect":"Allow"} is an Allow to one, a Deny to another),
// and a security document must never be guessed at. Keys compare as decoded ("Eff\u0065ct" is Effect).
std::optional<json> parse_without_repeated_keys(std::string_view text) {
    std::vector<std::vector<std::string>>
        open_objects;  // the keys seen in each object being parsed
    bool repeated = false;
    json::parser_callback_t track = [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        if (event == json::parse_event_t::object_end && !open_objects.empty())
            open_objects.pop_back();
        if (event == json::parse_event_t::key && !open_objects.empty() && parsed.is_string()) {
            auto& keys = open_objects.back();
            const auto& key = parsed.get_ref<const std::string&>();
            if (std::find(keys.begin(), keys.end(), key) != keys.end()) repeated = true;
            keys.push_back(key);
        }
        return true;
    };
    json doc = json::parse(text, track, false);
    if (doc.is_discarded() || repeated) return std::nullopt;
    return doc;
}
}  // namespace

base::result<bucket_policy> parse_policy(std::string_view text, const std::string& bucket) {
    auto parsed = parse_without_repeated_keys(text);
    if (!parsed) return malformed("Policies must be valid JSON, each key named once in an object");
    json doc = std::move(*parsed);
    if (!doc.is_object()) return malformed("Policies must be valid JSON");
    if (doc.contains("Version") &&
        (!doc["Version"].is_string() ||
         (doc["Version"] != "2012-10-17" && doc["Version"] != "2008-10-17")))
        return malformed("The policy must contain a valid version string");
    if (!doc.contains("Statement")) return malformed("Missing required field Statement");
    json statements = doc["Statement"];
    if (statements.is_object()) statements = json::array({statements});
    for (const auto& field : doc.items())
        if (field.key() != "Version" && field.key() != "Id" && field.key() != "Statement")
            return malformed("Unknown field " + field.key());
    if (!statements.is_array() || statements.empty() || statements.size() > max_statements)
        return malformed("Statement must hold 1 to 100 statements");
    bucket_policy policy;
    for (const auto& s : statements) {
        auto st = statement_of(s, bucket);
        if (!st) return st.as_failure();
        for (const auto& c : st->conditions)
            if (c.key.starts_with(object_tag_condition_prefix)) policy.uses_object_tags = true;
        policy.statements.push_back(std::move(*st));
    }
    return policy;
}

policy_decision evaluate(const bucket_policy& policy, const policy_request& request) {
    const std::string action = base::to_lower(request.action);
    policy_decision d = policy_decision::none;
    for (const auto& s : policy.statements) {
        if (!statement_matches(s, request, action)) continue;
        if (!s.allow) return policy_decision::deny;  // Deny wins
        d = policy_decision::allow;
    }
    return d;
}

}  // namespace fjord::s3

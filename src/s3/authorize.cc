// Authorization, the one place that decides who may do what (docs/security.md, "Authorization"): the
// admin API is root's; a bucket's policy Deny refuses, then its owner may, then the policy's Allow, then
// the bucket's or the object's ACL; the object-level parts wait for the record (deferred_acl,
// deferred_policy). Authentication (SigV4) is authenticate_and_dispatch's, before this.

#include <array>

#include "base/encoding.h"
#include "io/reactor.h"
#include "s3/policy.h"
#include "s3/service.h"
#include "s3/operations.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

base::failure access_denied() { return base::fail(base::errc::access_denied, "Access Denied"); }

// The source bucket of x-amz-copy-source ("/bucket/key" or "bucket/key", URL-encoded).
std::string copy_source_bucket(std::string_view header) {
    header = header.substr(0, header.find('?'));
    auto decoded = base::uri_decode(header, false);
    std::string_view text = decoded ? std::string_view(*decoded) : header;
    if (text.starts_with('/')) text.remove_prefix(1);
    return std::string(text.substr(0, text.find('/')));
}
}  // namespace

bool owns(const context& c, const store::bucket_info& bucket) {
    const std::string owner = owner_of(bucket);
    return owner.empty() ? c.svc.users().is_root(c.auth.access_key) : owner == c.auth.access_key;
}

namespace {
// The IAM action of an S3 operation (for bucket policies): most share their name.
std::string policy_action(std::string_view operation, const s3_request& r) {
    static const std::pair<std::string_view, std::string_view> renamed[] = {
        {"ListObjects", "ListBucket"},
        {"ListObjectsV2", "ListBucket"},
        {"HeadBucket", "ListBucket"},
        {"ListObjectVersions", "ListBucketVersions"},
        {"HeadObject", "GetObject"},
        {"CreateMultipartUpload", "PutObject"},
        {"UploadPart", "PutObject"},
        {"UploadPartCopy", "PutObject"},
        {"CompleteMultipartUpload", "PutObject"},
        {"CopyObject", "PutObject"},
        {"ListParts", "ListMultipartUploadParts"},
        {"ListMultipartUploads", "ListBucketMultipartUploads"},
        {"DeleteObjects", "DeleteObject"},
        {"DeleteBucketTagging", "PutBucketTagging"},
        {"GetBucketLifecycleConfiguration", "GetLifecycleConfiguration"},
        {"PutBucketLifecycleConfiguration", "PutLifecycleConfiguration"},
        {"DeleteBucketLifecycle", "PutLifecycleConfiguration"},
        {"DeleteBucketOwnershipControls", "PutBucketOwnershipControls"}};
    std::string action(operation);
    for (const auto& [from, to] : renamed)
        if (operation == from) action = to;
    if (operation == "FjordKvBatch")
        action = r.param("fjord-batch") == "put" ? "PutObject" : "GetObject";
    if (r.has("versionId") && (action == "GetObject" || action == "DeleteObject"))
        action += "Version";
    if (r.has("versionId") && (action == "GetObjectAcl" || action == "PutObjectAcl"))
        action.insert(action.size() - 3, "Version");
    return "s3:" + action;
}

// The caller's address without its port ("127.0.0.1:5000", "[::1]:5000").
std::string source_ip(std::string_view remote) {
    if (remote.starts_with('[')) return std::string(remote.substr(1, remote.find(']') - 1));
    return std::string(remote.substr(0, remote.rfind(':')));
}

// x-amz-copy-source's bucket, key and whether it names a version.
struct copy_source_name {
    std::string bucket, key;
    bool versioned = false;
};

copy_source_name copy_source_of(std::string_view header) {
    copy_source_name out;
    out.bucket = copy_source_bucket(header);
    auto question = header.find('?');
    if (question != std::string_view::npos)
        out.versioned = header.substr(question + 1).starts_with("versionId=");
    header = header.substr(0, question);
    auto decoded = base::uri_decode(header, false);
    std::string text = decoded ? *decoded : std::string(header);
    if (text.starts_with('/')) text.erase(0, 1);
    auto slash = text.find('/');
    if (slash != std::string::npos) out.key = text.substr(slash + 1);
    return out;
}
}  // namespace

bucket_access access_of(const context& c, const std::string& bucket) {
    bucket_access a;
    a.info = c.svc.store().find_bucket(bucket);
    if (!a.info) return a;
    a.owner = owns(c, *a.info);
    if (auto text = a.info->attributes.find(policy_attribute); text != a.info->attributes.end()) {
        a.policy = c.svc.parsed_policy(bucket, text->second);
        a.broken = !a.policy;  // its Denies cannot be known: nobody but root passes
    }
    a.ownership = ownership_of(*a.info);
    a.owner_id = owner_id(c, *a.info);
    if (a.ownership == object_ownership::enforced) return a;
    if (auto text = a.info->attributes.find(acl_attribute); text != a.info->attributes.end()) {
        auto acl = decode_acl(text->second);
        a.broken = a.broken || !acl;
        if (acl) a.acl = std::move(*acl);
    } else {
        a.acl = owner_full_control(a.owner_id);
    }
    return a;
}

// Parsing a policy costs more than the rest of a small GET (18 us against 22 us of server CPU per 4 KiB
// GET, `fjord bench s3`): each core keeps the policies it parsed, by bucket, for as long as their text
// is the same.
std::shared_ptr<const bucket_policy> service::parsed_policy(const std::string& bucket,
                                                            const std::string& text) const {
    policy_cache* cache = nullptr;
    if (io::reactor::on_reactor_thread() && io::reactor::current().core() < _policy_caches.size())
        cache = _policy_caches[io::reactor::current().core()].get();
    if (cache)
        if (auto it = cache->find(bucket); it != cache->end() && it->second.first == text)
            return it->second.second;
    auto policy = parse_policy(text, bucket);
    if (!policy) return nullptr;
    auto shared = std::make_shared<const bucket_policy>(std::move(*policy));
    if (cache) {
        if (cache->size() >= 4096)
            cache->clear();  // bounded: at most a few thousand buckets' worth
        (*cache)[bucket] = {text, shared};
    }
    return shared;
}

namespace {
// What an ACL must grant for an action (S3's mapping of ACL permissions to operations): on the bucket,
// or on the object. Deleting a version stays the owner's or a policy's: WRITE may replace and delete
// objects, never remove their history.
struct acl_need {
    acl_permission permission;
    bool object;
};

std::optional<acl_need> acl_need_of(std::string_view action) {
    using p = acl_permission;
    static const std::pair<std::string_view, acl_need> needs[] = {
        {"s3:ListBucket", {p::read, false}},
        {"s3:ListBucketVersions", {p::read, false}},
        {"s3:ListBucketMultipartUploads", {p::read, false}},
        {"s3:PutObject", {p::write, false}},
        {"s3:DeleteObject", {p::write, false}},
        {"s3:AbortMultipartUpload", {p::write, false}},
        {"s3:ListMultipartUploadParts", {p::write, false}},
        {"s3:GetBucketAcl", {p::read_acp, false}},
        {"s3:PutBucketAcl", {p::write_acp, false}},
        {"s3:GetObject", {p::read, true}},
        {"s3:GetObjectVersion", {p::read, true}},
        {"s3:GetObjectAcl", {p::read_acp, true}},
        {"s3:GetObjectVersionAcl", {p::read_acp, true}},
        {"s3:PutObjectAcl", {p::write_acp, true}},
        {"s3:PutObjectVersionAcl", {p::write_acp, true}},
        // Not in S3's ACL table, but an object another user owns answers them as its ACL says, as
        // GetObject does: reading its tags and attributes needs READ, changing its tags WRITE_ACP (which
        // could grant itself anything)
        {"s3:GetObjectTagging", {p::read, true}},
        {"s3:GetObjectAttributes", {p::read, true}},
        {"s3:PutObjectTagging", {p::write_acp, true}},
        {"s3:DeleteObjectTagging", {p::write_acp, true}}};
    for (const auto& [name, need] : needs)
        if (name == action) return need;
    return std::nullopt;
}
}  // namespace

namespace {
// The request's values for the condition keys a policy may test (policy.h): its headers of those names,
// and the listing parameters.
// `head` is the HTTP head (aws:Referer, aws:UserAgent), `acting` the headers the request acts on (the
// same, or a POST form's fields).
std::vector<std::pair<std::string, std::string>> policy_values(const http::request_head& head,
                                                               const http::request_head& acting,
                                                               const s3_request& r) {
    std::vector<std::pair<std::string, std::string>> out;
    for (std::string_view key : policy_string_keys) {
        std::string_view name = key.substr(key.find(':') + 1);  // without "s3:" or "aws:"
        if (key.starts_with("aws:")) {
            const http::header* h = head.find(name == "referer" ? "referer" : "user-agent");
            if (h) out.emplace_back(std::string(key), std::string(h->value));
        } else if (name.starts_with("x-amz-")) {
            // Every value of a repeated header, comma-joined as S3 sees it: an ACL applies every grant
            // header, so a Deny must see them all (single-valued ones are refused when repeated,
            // check_single_valued)
            std::optional<std::string> joined;
            for (const auto& h : acting.headers)
                if (base::iequals(h.name, name))
                    joined = joined ? *joined + "," + std::string(h.value) : std::string(h.value);
            if (!joined) continue;
            std::string value = std::move(*joined);
            if (name == "x-amz-copy-source") {  // compared as "bucket/key", decoded
                value = base::uri_decode(value, false).value_or(value);
                if (value.starts_with('/')) value.erase(0, 1);
            }
            out.emplace_back(std::string(key), std::move(value));
        } else if (name != "prefix" && r.has(name == "versionid" ? "versionId" : name)) {
            out.emplace_back(std::string(key),
                             std::string(r.param(name == "versionid" ? "versionId" : name)));
        }
    }
    return out;
}
}  // namespace

base::result<void> decide(const context& c, const bucket_access& a, const std::string& resource,
                          const std::string& action, std::optional<deferred_acl>* deferred,
                          std::optional<deferred_policy>* deferred_decision) {
    if (!a.info)
        return base::fail(base::errc::no_such_bucket, "The specified bucket does not exist");
    if (a.broken) return access_denied();
    policy_decision d = policy_decision::none;
    // With ACLs enabled an object's own ACL decides who reads it, its bucket's owner included (S3: a
    // bucket owner cannot read an object another account owns unless its ACL says so)
    auto need = a.acl ? acl_need_of(action) : std::nullopt;
    if (a.policy) {
        policy_request r{c.auth.access_key,
                         action,
                         resource,
                         source_ip(c.ex.remote_address()),
                         {},
                         policy_values(c.ex.head(), c.acting_head(), c.req)};
        if ((action == "s3:ListBucket" || action == "s3:ListBucketVersions") && c.req.has("prefix"))
            r.prefix = std::string(c.req.param("prefix"));
        if (a.policy->uses_object_tags && deferred_decision) {
            deferred_policy later{a.policy, std::move(r), std::nullopt, a.owner};
            if (need && need->object)
                later.acl = deferred_acl{need->permission, a.owner_id};
            else if (need)
                later.fallback = acl_permits(*a.acl, c.auth.access_key, need->permission);
            *deferred_decision = std::move(later);
            return {};
        }
        d = evaluate(*a.policy, r);
    }
    if (d == policy_decision::deny) return access_denied();
    if (need && need->object && deferred) {
        *deferred = deferred_acl{need->permission, a.owner_id, d == policy_decision::allow};
        return {};
    }
    if (d == policy_decision::allow) return {};
    // Bucket permissions come from the bucket's ACL, its owner's too (who may always read and replace
    // that ACL, so it cannot lock itself out); everything else is the owner's
    if (need && !need->object) {
        if (acl_permits(*a.acl, c.auth.access_key, need->permission)) return {};
        return access_denied();
    }
    if (a.owner) return {};
    return access_denied();
}

base::result<void> complete_policy(const deferred_policy& d, const std::string& caller,
                                   const store::object_record& record) {
    policy_request r = d.request;
    for (const auto& [key, value] : record.tags)
        r.values.emplace_back(std::string(object_tag_condition_prefix) + key, value);
    const policy_decision decided = evaluate(*d.policy, r);
    if (decided == policy_decision::deny) return access_denied();
    if (d.acl) {
        deferred_acl acl = *d.acl;
        acl.policy_allows = decided == policy_decision::allow;
        return object_acl_allows(acl, caller, record);
    }
    if (decided == policy_decision::allow) return {};
    return d.fallback ? base::result<void>{} : access_denied();
}

base::result<void> object_check::operator()(const store::object_record& record) const {
    if (policy) return complete_policy(*policy, caller, record);
    if (acl) return object_acl_allows(*acl, caller, record);
    return {};
}

base::result<void> check_policy(const context& c, const std::string& bucket,
                                const std::string& resource, const std::string& action) {
    return decide(c, access_of(c, bucket), resource, action);
}

namespace {
// Operations only a bucket's owner (or root) may run, whatever a policy says: changing who may do what,
// and the KV batch API, whose keys are not checked one by one.
bool owner_only(std::string_view operation) {
    return operation.ends_with("BucketPolicy") || operation == "FjordKvBatch";
}

// The operations that check the record they act on (context::check_of_object) before they answer or
// change anything: only they may leave a policy decision on the object's tags until it is read.
bool reads_its_record(std::string_view operation) {
    static constexpr std::string_view operations[] = {
        "GetObject",        "HeadObject",       "GetObjectAcl",        "PutObjectAcl",
        "GetObjectTagging", "PutObjectTagging", "DeleteObjectTagging", "GetObjectAttributes"};
    return std::find(std::begin(operations), std::end(operations), operation) !=
           std::end(operations);
}

// The expected owner a header names against a bucket's actual one (its access key, or the caller's
// for root's buckets).
base::result<void> check_expected(const http::header* expected, const bucket_access& a,
                                  const std::string& caller) {
    if (!expected) return {};
    std::string owner = a.info ? owner_of(*a.info) : std::string();
    if (expected->value != (owner.empty() ? caller : owner))
        return base::fail(base::errc::access_denied, "Access Denied");
    return {};
}
}  // namespace

namespace {
// Headers that are policy condition keys and that the request acts on with one value: repeated, the
// policy and the operation could read different ones, so they are refused (the grant headers are lists,
// and a policy sees them joined).
base::result<void> check_single_valued(const http::request_head& head) {
    static constexpr std::string_view single[] = {
        "x-amz-acl",           "x-amz-copy-source",    "x-amz-metadata-directive",
        "x-amz-storage-class", "x-amz-content-sha256", "x-amz-server-side-encryption"};
    std::array<int, std::size(single)> seen{};
    for (const auto& h : head.headers) {
        if (h.name.size() < 9 || !base::iequals(h.name.substr(0, 6), "x-amz-")) continue;
        for (std::size_t i = 0; i < std::size(single); ++i)
            if (base::iequals(h.name, single[i]) && ++seen[i] > 1)
                return base::fail(
                    base::errc::invalid_argument,
                    "The header " + std::string(single[i]) + " may be given only once");
    }
    return {};
}
}  // namespace

base::result<void> check_access(context& c, access_kind kind, std::string_view operation) {
    if (c.req.bucket == system_bucket) return access_denied();
    FJORD_TRY(check_single_valued(c.acting_head()));
    const bool root = c.svc.users().is_root(c.auth.access_key);
    const bool anonymous = c.auth.access_key.empty();
    if (kind == access_kind::admin && !root) return access_denied();
    if (!root && anonymous && (c.req.bucket.empty() || kind == access_kind::create_bucket))
        return access_denied();
    // A CreateBucket of another's bucket is BucketAlreadyExists (create_owned_bucket), not a refusal
    const bool checked = !c.req.bucket.empty() && kind != access_kind::create_bucket;
    const http::header* expected = c.acting_head().find("x-amz-expected-bucket-owner");
    bucket_access target;  // root's requests look nothing up unless they name an expected owner
    if (checked && (!root || expected)) target = access_of(c, c.req.bucket);
    if (checked && !root) {
        if (!target.info)
            return base::fail(base::errc::no_such_bucket, "The specified bucket does not exist");
        if (owner_only(operation) && !target.owner) return access_denied();
        // DeleteObjects is checked key by key (delete_objects), once a policy could grant it at all
        const std::string resource =
            c.req.key.empty() ? c.req.bucket : c.req.bucket + "/" + c.req.key;
        if (operation != "DeleteObjects")
            FJORD_TRY(decide(c, target, resource, policy_action(operation, c.req), &c.object_acl,
                             reads_its_record(operation) ? &c.object_policy : nullptr));
        else if (!target.owner && !target.policy &&
                 !(target.acl &&
                   acl_permits(*target.acl, c.auth.access_key, acl_permission::write)))
            return access_denied();
    }
    if (checked) FJORD_TRY(check_expected(expected, target, c.auth.access_key));
    if (kind == access_kind::copy) {
        auto source = copy_source_of(c.ex.head().value_of("x-amz-copy-source"));
        if (source.bucket == system_bucket) return access_denied();
        const http::header* source_expected =
            c.ex.head().find("x-amz-source-expected-bucket-owner");
        bucket_access from;
        if (!root || source_expected) from = access_of(c, source.bucket);
        // Every condition a GET of the source would see, its tags included (source_policy)
        if (!root)
            FJORD_TRY(decide(c, from, source.bucket + "/" + source.key,
                             source.versioned ? "s3:GetObjectVersion" : "s3:GetObject",
                             &c.source_acl, &c.source_policy));
        FJORD_TRY(check_expected(source_expected, from, c.auth.access_key));
    }
    return {};
}

bool may_delete(const context& c, const bucket_access& access, const std::string& key,
                bool version) {
    if (c.svc.users().is_root(c.auth.access_key)) return true;
    return bool(decide(c, access, c.req.bucket + "/" + key,
                       version ? "s3:DeleteObjectVersion" : "s3:DeleteObject"));
}

base::error visible_error(const context& c, base::error err) {
    if (err.code != base::errc::no_such_key || c.svc.users().is_root(c.auth.access_key)) return err;
    if (!check_policy(c, c.req.bucket, c.req.bucket, "s3:ListBucket"))
        return {base::errc::access_denied, "Access Denied"};
    return err;
}

}  // namespace fjord::s3

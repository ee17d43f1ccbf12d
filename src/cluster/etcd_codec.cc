#include "cluster/etcd_codec.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/encoding.h"

namespace fjord::cluster {

namespace {

using json = nlohmann::json;

// Field-by-field parsing passes the first failure up.
#define ETCD_TRY_ASSIGN(lhs, expr)                                                                 \
    do {                                                                                           \
        auto etcd_try_result_ = (expr);                                                            \
        if (!etcd_try_result_) return etcd_try_result_.as_failure();                               \
        (lhs) = std::move(*etcd_try_result_);                                                      \
    } while (0)
#define ETCD_TRY_DECLARE(name, expr)                                                               \
    auto name##_parsed_ = (expr);                                                                  \
    if (!name##_parsed_) return name##_parsed_.as_failure();                                       \
    auto& name = *name##_parsed_

std::string b64(std::string_view raw) { return base::base64_encode(raw); }

base::failure malformed(std::string_view what) {
    return base::fail(base::errc::bad_request,
                      "etcd answered with unexpected JSON: " + std::string(what));
}

// The gateway writes int64 as a JSON string ("42") and leaves a 0 out; numbers are accepted too.
base::result<std::int64_t> int_field(const json& object, const char* name) {
    auto it = object.find(name);
    if (it == object.end()) return std::int64_t{0};
    if (it->is_number_integer()) return it->get<std::int64_t>();
    if (it->is_string()) {
        const std::string& text = it->get_ref<const std::string&>();
        bool negative = !text.empty() && text[0] == '-';
        auto n = base::parse_u64(negative ? std::string_view(text).substr(1) : text);
        if (n && *n <= static_cast<std::uint64_t>(INT64_MAX))
            return negative ? -static_cast<std::int64_t>(*n) : static_cast<std::int64_t>(*n);
    }
    return malformed(std::string(name) + " is not an integer");
}

base::result<std::string> bytes_field(const json& object, const char* name) {
    auto it = object.find(name);
    if (it == object.end()) return std::string();
    if (!it->is_string()) return malformed(std::string(name) + " is not a string");
    auto raw = base::base64_decode(it->get_ref<const std::string&>());
    if (!raw) return malformed(std::string(name) + " is not base64");
    return std::move(*raw);
}

base::result<json> parse_object(std::string_view text) {
    json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) return malformed("not a JSON object");
    return doc;
}

base::result<std::int64_t> header_revision(const json& doc) {
    auto header = doc.find("header");
    if (header == doc.end() || !header->is_object()) return malformed("no header");
    return int_field(*header, "revision");
}

base::result<etcd_kv> parse_kv(const json& item) {
    if (!item.is_object()) return malformed("a kv is not an object");
    etcd_kv kv;
    ETCD_TRY_ASSIGN(kv.key, bytes_field(item, "key"));
    ETCD_TRY_ASSIGN(kv.value, bytes_field(item, "value"));
    ETCD_TRY_ASSIGN(kv.create_revision, int_field(item, "create_revision"));
    ETCD_TRY_ASSIGN(kv.mod_revision, int_field(item, "mod_revision"));
    ETCD_TRY_ASSIGN(kv.version, int_field(item, "version"));
    ETCD_TRY_ASSIGN(kv.lease, int_field(item, "lease"));
    return kv;
}

base::result<std::vector<etcd_kv>> parse_kvs(const json& object) {
    std::vector<etcd_kv> out;
    auto kvs = object.find("kvs");
    if (kvs == object.end()) return out;
    if (!kvs->is_array()) return malformed("kvs is not an array");
    out.reserve(kvs->size());
    for (const json& item : *kvs) {
        ETCD_TRY_DECLARE(kv, parse_kv(item));
        out.push_back(std::move(kv));
    }
    return out;
}

json compare_json(const txn_compare& c) {
    bool create = c.what == txn_compare::target::create;
    json out = {{"target", create ? "CREATE" : "MOD"}, {"key", b64(c.key)}, {"result", "EQUAL"}};
    out[create ? "create_revision" : "mod_revision"] = std::to_string(c.revision);
    return out;
}

}  // namespace

std::string prefix_end(std::string_view prefix) {
    std::string end(prefix);
    while (!end.empty()) {
        auto& last = reinterpret_cast<unsigned char&>(end.back());
        if (last < 0xff) {
            ++last;
            return end;
        }
        end.pop_back();
    }
    return std::string(1, '\0');  // every key: etcd's "\0" range end
}

std::string range_body(std::string_view key, std::string_view range_end, std::int64_t limit,
                       std::int64_t revision) {
    json body = {{"key", b64(key)}};
    if (!range_end.empty()) body["range_end"] = b64(range_end);
    if (limit > 0) body["limit"] = std::to_string(limit);
    if (revision > 0) body["revision"] = std::to_string(revision);
    return body.dump();
}

std::string put_body(std::string_view key, std::string_view value, std::int64_t lease) {
    json body = {{"key", b64(key)}, {"value", b64(value)}};
    if (lease != 0) body["lease"] = std::to_string(lease);
    return body.dump();
}

std::string delete_range_body(std::string_view key, std::string_view range_end) {
    json body = {{"key", b64(key)}};
    if (!range_end.empty()) body["range_end"] = b64(range_end);
    return body.dump();
}

std::string lease_grant_body(std::int64_t ttl_s) {
    return json{{"TTL", std::to_string(ttl_s)}}.dump();
}

std::string lease_id_body(std::int64_t lease) { return json{{"ID", std::to_string(lease)}}.dump(); }

std::string txn_body(const txn_request& txn) {
    json compares = json::array(), success = json::array(), failure = json::array();
    for (const auto& c : txn.compares) compares.push_back(compare_json(c));
    for (const auto& p : txn.puts)
        success.push_back({{"request_put", json::parse(put_body(p.key, p.value, p.lease))}});
    for (const auto& key : txn.deletes)
        success.push_back({{"request_delete_range", {{"key", b64(key)}}}});
    if (!txn.read_on_failure.empty())
        failure.push_back({{"request_range", {{"key", b64(txn.read_on_failure)}}}});
    return json{{"compare", compares}, {"success", success}, {"failure", failure}}.dump();
}

base::result<range_result> parse_range(std::string_view text) {
    ETCD_TRY_DECLARE(doc, parse_object(text));
    range_result out;
    ETCD_TRY_ASSIGN(out.revision, header_revision(doc));
    ETCD_TRY_ASSIGN(out.kvs, parse_kvs(doc));
    ETCD_TRY_ASSIGN(out.count, int_field(doc, "count"));
    auto more = doc.find("more");
    out.more = more != doc.end() && more->is_boolean() && more->get<bool>();
    return out;
}

base::result<std::int64_t> parse_revision(std::string_view text) {
    ETCD_TRY_DECLARE(doc, parse_object(text));
    return header_revision(doc);
}

base::result<std::int64_t> parse_deleted(std::string_view text) {
    ETCD_TRY_DECLARE(doc, parse_object(text));
    FJORD_TRY(header_revision(doc));
    return int_field(doc, "deleted");
}

base::result<lease_grant> parse_lease_grant(std::string_view text) {
    ETCD_TRY_DECLARE(doc, parse_object(text));
    if (auto error = doc.find("error"); error != doc.end() && error->is_string() && !error->empty())
        return base::fail(base::errc::service_unavailable,
                          "etcd refused a lease: " + error->get<std::string>());
    lease_grant out;
    ETCD_TRY_ASSIGN(out.id, int_field(doc, "ID"));
    ETCD_TRY_ASSIGN(out.ttl_s, int_field(doc, "TTL"));
    if (out.id == 0 || out.ttl_s <= 0) return malformed("a lease grant without an ID or TTL");
    return out;
}

base::result<std::int64_t> parse_keepalive(std::string_view text) {
    // A streaming call: the one answer arrives as {"result": {...}} (or {"error": {...}}).
    ETCD_TRY_DECLARE(doc, parse_object(text));
    if (auto error = doc.find("error"); error != doc.end())
        return base::fail(base::errc::service_unavailable,
                          "etcd refused a keepalive: " + error->dump());
    auto result = doc.find("result");
    if (result == doc.end() || !result->is_object()) return malformed("a keepalive without result");
    return int_field(*result, "TTL");
}

base::result<txn_result> parse_txn(std::string_view text) {
    ETCD_TRY_DECLARE(doc, parse_object(text));
    txn_result out;
    ETCD_TRY_ASSIGN(out.revision, header_revision(doc));
    auto succeeded = doc.find("succeeded");
    out.succeeded = succeeded != doc.end() && succeeded->is_boolean() && succeeded->get<bool>();
    auto responses = doc.find("responses");
    if (out.succeeded || responses == doc.end()) return out;
    if (!responses->is_array()) return malformed("responses is not an array");
    for (const json& r : *responses) {
        auto range = r.find("response_range");
        if (range != r.end() && range->is_object()) ETCD_TRY_ASSIGN(out.read, parse_kvs(*range));
    }
    return out;
}

std::string watch_create_body(std::string_view key, std::string_view range_end,
                              std::int64_t start_revision) {
    json request = {{"key", b64(key)}};
    if (!range_end.empty()) request["range_end"] = b64(range_end);
    if (start_revision > 0) request["start_revision"] = std::to_string(start_revision);
    return json{{"create_request", request}}.dump();
}

base::result<watch_message> parse_watch_message(std::string_view text) {
    ETCD_TRY_DECLARE(doc, parse_object(text));
    if (auto error = doc.find("error"); error != doc.end())
        return base::fail(base::errc::service_unavailable,
                          "etcd ended the watch: " + error->dump());
    auto result = doc.find("result");
    if (result == doc.end() || !result->is_object())
        return malformed("a watch message without result");
    watch_message out;
    ETCD_TRY_ASSIGN(out.revision, header_revision(*result));
    auto flag = [&](const char* name) {
        auto it = result->find(name);
        return it != result->end() && it->is_boolean() && it->get<bool>();
    };
    out.created = flag("created");
    out.canceled = flag("canceled");
    ETCD_TRY_ASSIGN(out.compact_revision, int_field(*result, "compact_revision"));
    if (auto reason = result->find("cancel_reason"); reason != result->end() && reason->is_string())
        out.cancel_reason = reason->get<std::string>();
    auto events = result->find("events");
    if (events == result->end()) return out;
    if (!events->is_array()) return malformed("events is not an array");
    for (const json& event : *events) {
        auto kv = event.find("kv");
        if (!event.is_object() || kv == event.end() || !kv->is_object())
            return malformed("an event without its kv");
        watch_event change;
        ETCD_TRY_ASSIGN(change.kv, parse_kv(*kv));
        if (change.kv.key.empty() || change.kv.mod_revision <= 0)
            return malformed("an event without its key or revision");
        // PUT (0) is the enum's default, left out; DELETE is 1. A gateway may send either by name
        // or by number.
        if (auto type = event.find("type"); type != event.end()) {
            const bool put = *type == "PUT" || *type == 0;
            change.deleted = *type == "DELETE" || *type == 1;
            if (!put && !change.deleted) return malformed("an event of an unknown type");
        }
        out.last_mod_revision = std::max(out.last_mod_revision, change.kv.mod_revision);
        out.events.push_back(std::move(change));
    }
    return out;
}

base::error gateway_error(int http_status, std::string_view text) {
    json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    std::int64_t code = -1;
    std::string message = "no message";
    if (doc.is_object()) {
        if (auto c = doc.find("code"); c != doc.end() && c->is_number_integer())
            code = c->get<std::int64_t>();
        if (auto m = doc.find("message"); m != doc.end() && m->is_string())
            message = m->get<std::string>();
    }
    // Without a gRPC code, a 502, 503 or 504 is a proxy's or a gateway's: etcd is out of reach.
    base::errc errc = code < 0 && http_status >= 502 && http_status <= 504
                          ? base::errc::service_unavailable
                          : base::errc::internal;
    if (code == 5)
        errc = base::errc::not_found;  // gRPC NotFound
    else if (code == 14)
        errc = base::errc::service_unavailable;  // Unavailable
    else if (code == 4)
        errc = base::errc::timed_out;  // DeadlineExceeded
    else if (code == 3)
        errc = base::errc::invalid_argument;  // InvalidArgument
    return base::error{errc, "etcd answered " + std::to_string(http_status) + ": " + message};
}

}  // namespace fjord::cluster

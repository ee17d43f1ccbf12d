#include "cluster/shard_service.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "cluster/rpc.h"
#include "cluster/stripe.h"
#include "io/ops.h"
#include "store/codec.h"

namespace fjord::cluster {

namespace {

std::optional<std::string> query_value(std::string_view raw_query, std::string_view name) {
    while (!raw_query.empty()) {
        const std::size_t amp = raw_query.find('&');
        std::string_view pair = raw_query.substr(0, amp);
        raw_query = amp == std::string_view::npos ? std::string_view() : raw_query.substr(amp + 1);
        const std::size_t eq = pair.find('=');
        if (pair.substr(0, eq) != name) continue;
        if (eq == std::string_view::npos) return std::string();
        return base::uri_decode(pair.substr(eq + 1), false);
    }
    return std::nullopt;
}

std::optional<std::uint64_t> query_number(std::string_view raw_query, std::string_view name) {
    auto text = query_value(raw_query, name);
    if (!text) return std::nullopt;
    return base::parse_u64(*text);
}

// A failure as the data plane answers it: the error's number in x-fjord-error, its message as the body.
io::task<void> answer_error(http::exchange& ex, const base::error& err) {
    int status = base::errc_http_status(err.code);
    if (status < 400) status = 500;
    http::header_list headers = {{"x-fjord-error", std::to_string(static_cast<int>(err.code))},
                                 {"Content-Type", "text/plain"}};
    if (!ex.body().finished()) ex.close_after();
    (void)co_await ex.send_all(status, headers, err.message);
}

io::task<void> answer_ok(http::exchange& ex, std::string_view body, bool rebuilding = false) {
    // A rebuilding node says so with what it holds: its "absent" proves nothing (rpc.h).
    if (rebuilding)
        (void)co_await ex.send_all(
            200, {{"Content-Type", "application/octet-stream"}, {rebuilding_header, "1"}}, body);
    else
        (void)co_await ex.send_all(200, {{"Content-Type", "application/octet-stream"}}, body);
}

io::task<base::result<void>> read_exact(http::body_reader& body, std::byte* dst, std::size_t len) {
    for (std::size_t done = 0; done < len;) {
        auto n = co_await body.read(dst + done, len - done);
        if (!n) co_return n.as_failure();
        if (*n == 0)
            co_return base::fail(base::errc::incomplete_body, "a shard upload ended early");
        done += *n;
    }
    co_return base::result<void>{};
}

io::task<base::result<std::string>> read_small_body(http::body_reader& body, std::size_t limit) {
    std::string out;
    for (;;) {
        const std::size_t old = out.size();
        if (old > limit) co_return base::fail(base::errc::entity_too_large, "a body too long");
        out.resize(old + 64 * 1024);
        auto n = co_await body.read(reinterpret_cast<std::byte*>(out.data() + old), 64 * 1024);
        if (!n) co_return n.as_failure();
        out.resize(old + *n);
        if (*n == 0) break;
    }
    if (out.size() > limit) co_return base::fail(base::errc::entity_too_large, "a body too long");
    co_return out;
}

// The shard bytes of an upload's body, for the engine to store: each block is passed on as it arrives
// and checked against the CRC32C after it before the next one starts; after the last block, the record
// that ends the body is read (and the engine's final read sees the end only when it is whole).
class frame_source final : public store::byte_source {
public:
    frame_source(http::body_reader& body, const upload_head& head)
        : _body(body), _head(head), _layout(head.layout()), _stripes(_layout.stripes()) {}

    io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) override {
        while (_stripe < _stripes && _in_block == _layout.block_of(_stripe))
            FJORD_CO_TRY(co_await check_block());
        if (_stripe == _stripes) {
            if (!_meta) FJORD_CO_TRY(co_await read_trailer());
            co_return std::size_t{0};
        }
        const std::size_t want = std::min<std::size_t>(max, _layout.block_of(_stripe) - _in_block);
        auto n = co_await _body.read(dst, want);
        if (!n) co_return n;
        if (*n == 0)
            co_return base::fail(base::errc::incomplete_body, "a shard upload ended early");
        _crc = base::crc32c(std::span<const std::byte>(dst, *n), _crc);
        _in_block += *n;
        co_return *n;
    }
    // The record that ended the body, with the CRCs checked on the way (after read() returned 0).
    const shard_meta& meta() const { return *_meta; }

private:
    io::task<base::result<void>> check_block() {
        std::uint32_t sent = 0;
        FJORD_CO_TRY(co_await read_exact(_body, reinterpret_cast<std::byte*>(&sent), 4));
        if (sent != _crc)
            co_return base::fail(base::errc::bad_digest, "block " + std::to_string(_stripe) +
                                                             " of a shard upload "
                                                             "does not match its CRC32C");
        _crcs.push_back(_crc);
        ++_stripe;
        _in_block = 0;
        _crc = 0;
        co_return base::result<void>{};
    }
    io::task<base::result<void>> read_trailer() {
        std::uint32_t len = 0;
        FJORD_CO_TRY(co_await read_exact(_body, reinterpret_cast<std::byte*>(&len), 4));
        if (len > max_trailer_bytes)
            co_return base::fail(base::errc::entity_too_large, "a shard record too long");
        std::string bytes(len, '\0');
        FJORD_CO_TRY(co_await read_exact(_body, reinterpret_cast<std::byte*>(bytes.data()), len));
        std::byte extra[1];
        auto end = co_await _body.read(extra, 1);
        if (!end) co_return end.as_failure();
        if (*end != 0)
            co_return base::fail(base::errc::invalid_argument, "bytes after a shard's record");
        auto meta = decode_shard_meta(bytes);
        if (!meta) co_return meta.as_failure();
        if (!matches(_head, *meta) || meta->block_crcs != _crcs)
            co_return base::fail(base::errc::invalid_argument,
                                 "a shard's record does not match its upload");
        _meta = std::move(*meta);
        co_return base::result<void>{};
    }

    http::body_reader& _body;
    const upload_head& _head;
    stripe_layout _layout;
    std::uint64_t _stripes = 0;
    std::uint64_t _stripe = 0;
    std::uint64_t _in_block = 0;
    std::uint32_t _crc = 0;
    std::vector<std::uint32_t> _crcs;
    std::optional<shard_meta> _meta;
};

// Sends a shard's bytes as frames: after each block's bytes, the CRC32C the record keeps for it.
class frame_sink final : public store::byte_sink {
public:
    frame_sink(http::exchange& ex, const shard_meta& meta, std::uint64_t first)
        : _ex(ex), _meta(meta), _layout(meta.layout()), _stripe(first) {}

    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        while (!data.empty()) {
            const std::size_t n =
                std::min<std::size_t>(data.size(), _layout.block_of(_stripe) - _in_block);
            FJORD_CO_TRY(co_await _ex.send_body(data.first(n)));
            data = data.subspan(n);
            _in_block += n;
            if (_in_block == _layout.block_of(_stripe)) {
                const std::uint32_t crc = _meta.block_crcs[_stripe];
                FJORD_CO_TRY(
                    co_await _ex.send_body(std::span(reinterpret_cast<const std::byte*>(&crc), 4)));
                ++_stripe;
                _in_block = 0;
            }
        }
        co_return base::result<void>{};
    }

private:
    http::exchange& _ex;
    const shard_meta& _meta;
    stripe_layout _layout;
    std::uint64_t _stripe;
    std::uint64_t _in_block = 0;
};

base::result<shard_meta> meta_of(const store::object_record& record) {
    bool damaged = false;
    std::optional<base::result<shard_meta>> meta;
    for (const auto& [name, value] : record.headers) {
        if (name == shard_header) meta = decode_shard_meta(value);
        if (name == damaged_header) damaged = true;
    }
    if (!meta) return base::fail(base::errc::data_corrupted, "a record without its shard record");
    if (*meta) (*meta)->damaged = damaged;
    return std::move(*meta);
}

bool absent_code(base::errc code) {
    return code == base::errc::no_such_key || code == base::errc::no_such_bucket ||
           code == base::errc::no_such_version;
}

// The key's shard versions on this node, newest stamp first (the version ids are the stamps' texts).
io::task<base::result<std::vector<store::object_record>>> shard_versions(store::object_store& local,
                                                                         std::string bucket,
                                                                         std::string key) {
    std::vector<store::object_record> out;
    if (!local.bucket_exists(bucket)) co_return out;
    store::list_request request;
    request.bucket = bucket;
    request.prefix = key;
    request.max_keys = max_versions_per_key;
    auto page = co_await local_versions(local, request.bucket).list_versions(std::move(request));
    if (!page) co_return page.as_failure();
    for (const auto& e : page->entries) {
        if (e.is_prefix || e.name != key || e.delete_marker) continue;
        auto record =
            co_await local_versions(local, bucket).head_version(bucket, key, e.version_id);
        if (!record) {
            if (absent_code(record.code())) continue;  // removed meanwhile
            co_return record.as_failure();
        }
        out.push_back(std::move(*record));
    }
    std::sort(out.begin(), out.end(),
              [](const store::object_record& a, const store::object_record& b) {
                  return a.etag > b.etag;
              });
    co_return out;
}

}  // namespace

io::task<void> mark_damaged(store::object_store& local, std::string bucket, std::string key,
                            std::string version_id) {
    auto mark = [](store::object_record& r) -> base::result<void> {
        for (const auto& h : r.headers)
            if (h.first == damaged_header) return {};
        r.headers.emplace_back(damaged_header, "1");
        return {};
    };
    auto marked =
        co_await local_versions(local, bucket).update_version(bucket, key, version_id, mark);
    if (!marked && !absent_code(marked.code()))
        LOG_WARN("shard %s/%s: cannot mark version %s damaged: %s", bucket.c_str(), key.c_str(),
                 version_id.c_str(), marked.err().message.c_str());
}

store::version_store& local_versions(store::object_store& local, const std::string& bucket) {
    store::version_store* versions = local.versions_of(bucket);
    FJORD_ASSERT(versions, "the node's store keeps no versions");
    return *versions;
}

store::ordered_puts& local_ordered(store::object_store& local, const std::string& bucket) {
    store::ordered_puts* ordered = local.ordered_puts_of(bucket);
    FJORD_ASSERT(ordered, "the node's store takes no ordered writes");
    return *ordered;
}

store::bucket_attributes& local_attributes(store::object_store& local, const std::string& bucket) {
    store::bucket_attributes* attributes = local.attributes_of(bucket);
    FJORD_ASSERT(attributes, "the node's store keeps no bucket attributes");
    return *attributes;
}

shard_service::shard_service(store::object_store& local, auth::credentials root, std::string region,
                             stamp_clock* clock)
    : _local(local), _clock(clock) {
    _root.add(std::move(root));
    _verify.region = std::move(region);
}

void shard_service::declare_rebuilding() {
    std::lock_guard<std::mutex> lock(_rebuilding_mutex);
    _declared_ns = base::monotonic_now_ns();
    _rebuilding.store(true, std::memory_order_release);
}

void shard_service::note_view(bool marked, std::int64_t read_began_ns) {
    std::lock_guard<std::mutex> lock(_rebuilding_mutex);
    if (marked) {
        _rebuilding.store(true, std::memory_order_release);
        return;
    }
    // A map read before the node marked itself does not have the mark yet: it proves nothing.
    if (read_began_ns > _declared_ns && _rebuilding.exchange(false, std::memory_order_acq_rel))
        LOG_INFO("cluster: this node's drive is rebuilt (the map no longer marks it)");
}

io::task<void> node_handler::handle(http::exchange& ex) {
    if (ex.head().path.starts_with(rpc_prefix))
        co_await _shards.handle(ex);
    else
        co_await _s3.handle(ex);
}

io::task<void> shard_service::handle(http::exchange& ex) {
    const http::request_head& head = ex.head();
    std::vector<auth::header_view> headers;
    headers.reserve(head.headers.size());
    for (const auto& h : head.headers) headers.push_back({h.name, h.value});
    auth::request_view view{head.method_text, head.path, head.query, headers};
    auto verified = auth::verify_request(view, _root, base::unix_now_ms() / 1000, _verify);
    if (!verified) {
        co_await answer_error(ex, base::error{base::errc::access_denied,
                                              "the cluster's data plane takes only the root key"});
        co_return;
    }
    auto target = parse_rpc_path(head.path);
    if (!target) {
        co_await answer_error(ex, target.err());
        co_return;
    }
    const std::string_view method = head.method_text;
    if ((target->op == "meta" || target->op == "list") &&
        _answers_held.load(std::memory_order_acquire)) {
        co_await answer_error(ex, base::error{base::errc::service_unavailable,
                                              "this node is checking its drive; ask again"});
        co_return;
    }
    if (target->op == "shard" && method == "PUT")
        co_await put_shard(ex, *target);
    else if (target->op == "shard" && method == "GET")
        co_await get_shard(ex, *target);
    else if (target->op == "shard" && method == "DELETE")
        co_await remove_shard(ex, *target);
    else if (target->op == "trim" && method == "POST")
        co_await trim(ex, *target);
    else if (target->op == "meta" && method == "POST")
        co_await meta(ex, *target);
    else if (target->op == "list" && method == "GET")
        co_await list(ex, *target);
    else if (target->op == "bucket" && method == "DELETE")
        co_await drop_bucket(ex, *target);
    else if (target->op == "fence" && (method == "POST" || method == "DELETE"))
        co_await fence(ex, *target);
    else
        co_await answer_error(
            ex, base::error{base::errc::method_not_allowed, "no such cluster request"});
}

// A shard bucket keeps versions: a new version of a key's shard goes beside the older ones.
io::task<base::result<void>> shard_service::ensure_bucket(const std::string& bucket) {
    if (_local.bucket_has_attribute(bucket, store::versioning_attribute))
        co_return base::result<void>{};
    if (!_local.bucket_exists(bucket)) {
        auto made = co_await _local.create_bucket(bucket);
        if (!made && made.code() != base::errc::bucket_already_owned_by_you) co_return made;
    }
    co_return co_await local_attributes(_local, bucket)
        .set_bucket_attribute(bucket, store::versioning_attribute, std::string("Enabled"));
}

io::task<void> shard_service::put_shard(http::exchange& ex, const rpc_target& target) {
    const http::request_head& h = ex.head();
    auto head = parse_upload_head(h.value_of("x-fjord-stamp"), h.value_of("x-fjord-layout"),
                                  h.value_of("x-fjord-accept"));
    if (!head) {
        co_await answer_error(ex, head.err());
        co_return;
    }
    if (_clock) _clock->observe(head->version);
    if (fenced(target.bucket)) {  // (and its shard bucket is not made again once dropped)
        co_await answer_error(ex, base::error{base::errc::no_such_bucket,
                                              "the bucket is being deleted or was deleted"});
        co_return;
    }
    if (auto made = co_await ensure_bucket(target.bucket); !made) {
        co_await answer_error(ex, made.err());
        co_return;
    }
    store::put_request request;
    request.bucket = target.bucket;
    request.key = target.key;
    request.size_bytes = head->layout().shard_bytes();
    request.max_size_bytes = *request.size_bytes;
    store::write_order order;
    order.version_id = head->version.text();
    // Entity tags begin with the stamp: below "<stamp>" is an older version; below "<bound>~" is a
    // version at most the bound ('~' sorts after the kind and every digit that follow a stamp).
    order.etag_below = head->accept.kind == acceptance::rule::newer
                           ? head->version.text()
                           : head->accept.bound.text() + "~";
    frame_source source(ex.body(), *head);
    // A write's shard commits only within its deadline: past it, healing may have withdrawn the
    // version from the other nodes as one that never reached its quorum (docs/cluster.md, "Versions").
    const auto commit_within = base::parse_u64(h.value_of("x-fjord-commit-within"));
    bool counted = false;
    auto finish = [this, &source, commit_within, &counted,
                   &target](const store::written_data&) -> base::result<store::object_record> {
        const shard_meta& meta = source.meta();
        if (commit_within && base::unix_now_ms() >= meta.object.modified_ms +
                                                        static_cast<std::int64_t>(*commit_within))
            return base::fail(base::errc::timed_out, "the write's shard came too late to commit");
        // Checked at the commit itself: a DeleteBucket's fence waits for what passed it.
        if (auto open = begin_commit(target.bucket); !open) return open.as_failure();
        counted = true;
        store::object_record record;
        record.etag = shard_etag(meta);
        record.modified_ms = meta.object.modified_ms;
        record.headers.emplace_back(shard_header, encode_shard_meta(meta));
        return record;
    };
    store::ordered_puts& ordered = local_ordered(_local, target.bucket);
    auto stored =
        co_await ordered.put_ordered(std::move(request), std::move(order), source, finish);
    if (counted) end_commit(target.bucket);
    if (stored) {
        co_await answer_ok(ex, {});
        co_return;
    }
    if (stored.code() == base::errc::precondition_failed) {
        co_await answer_refused(ex, target, head->version.text());
        co_return;
    }
    co_await answer_error(ex, stored.err());
}

// The node holds a newer version (or, for a conditional write, one past its bound): a repeated upload
// of a version it already holds counts as stored, with the entity tag of what it holds
// (x-fjord-held-etag), which the coordinator compares with its own (one stamp may name two writes:
// a clock stepped back across a restart, or two nodes' tags alike); otherwise 409 with the newest
// version it holds.
io::task<void> shard_service::answer_refused(http::exchange& ex, const rpc_target& target,
                                             const std::string& version_text) {
    auto same = co_await local_versions(_local, target.bucket)
                    .head_version(target.bucket, target.key, version_text);
    auto current = co_await _local.head(target.bucket, target.key);
    std::string held = current ? current->etag.substr(0, stamp::text_bytes) : std::string();
    if (!ex.body().finished()) ex.close_after();
    if (same) {
        (void)co_await ex.send_all(200, {{held_etag_header, same->etag}}, {});
        co_return;
    }
    (void)co_await ex.send_all(
        409,
        {{"x-fjord-current", held},
         {"x-fjord-error", std::to_string(static_cast<int>(base::errc::precondition_failed))}},
        "a newer version is stored");
}

io::task<void> shard_service::get_shard(http::exchange& ex, const rpc_target& target) {
    const std::string_view query = ex.head().query;
    auto wanted = stamp::parse(query_value(query, "stamp").value_or(""));
    auto first = query_number(query, "first");
    auto count = query_number(query, "count");
    if (!wanted || !first || !count) {
        co_await answer_error(ex, base::error{base::errc::invalid_argument,
                                              "a shard read names stamp, first and count"});
        co_return;
    }
    const std::string version_id = wanted->text();
    auto record = co_await local_versions(_local, target.bucket)
                      .head_version(target.bucket, target.key, version_id);
    if (!record) {
        co_await answer_error(ex, absent_code(record.code())
                                      ? base::error{base::errc::no_such_key, "no such shard"}
                                      : record.err());
        co_return;
    }
    auto meta = meta_of(*record);
    if (!meta || meta->damaged) {
        co_await answer_error(
            ex, meta ? base::error{base::errc::data_corrupted, "the shard is damaged here"}
                     : meta.err());
        co_return;
    }
    const stripe_layout layout = meta->layout();
    if (meta->kind != shard_kind::object || *first > layout.stripes() ||
        *count > layout.stripes() - *first) {
        co_await answer_error(ex, base::error{base::errc::invalid_range, "no such stripes"});
        co_return;
    }
    std::uint64_t bytes = 0, frames = 0;
    for (std::uint64_t s = *first; s < *first + *count; ++s, ++frames) bytes += layout.block_of(s);
    const std::string etag = record->etag;
    const std::uint64_t offset = layout.shard_offset(*first);
    auto plan =
        [&](const store::object_record& r) -> base::result<std::optional<store::byte_range>> {
        if (r.etag != etag)
            return base::fail(base::errc::precondition_failed, "the shard was replaced");
        return std::optional<store::byte_range>(store::byte_range{offset, bytes});
    };
    frame_sink sink(ex, *meta, *first);
    if (auto sent = co_await ex.send_head(200, {{"Content-Type", "application/octet-stream"}},
                                          bytes + 4 * frames);
        !sent)
        co_return;
    if (bytes == 0) co_return;
    auto read = co_await local_versions(_local, target.bucket)
                    .get_version(target.bucket, target.key, version_id, plan, sink);
    if (!read) {
        LOG_WARN("shard %s/%s: read failed after its answer began: %s", target.bucket.c_str(),
                 target.key.c_str(), read.err().message.c_str());
        ex.close_after();
        // Damaged bytes (or a data file gone): the record is withdrawn, so that healing, which the
        // reader asks for, rebuilds the shard from the others.
        if (read.code() == base::errc::data_corrupted || read.code() == base::errc::not_found)
            co_await mark_damaged(_local, target.bucket, target.key, version_id);
    }
}

io::task<void> shard_service::remove_shard(http::exchange& ex, const rpc_target& target) {
    auto wanted = stamp::parse(query_value(ex.head().query, "stamp").value_or(""));
    if (!wanted) {
        co_await answer_error(ex, base::error{base::errc::invalid_argument, "a stamp to remove"});
        co_return;
    }
    // A writer's withdrawal arriving late (held up in the network): healing may since have taken the
    // version up, and removing it here could leave neither it nor the version before it readable.
    if (auto before = query_number(ex.head().query, "before");
        before && base::unix_now_ms() >= static_cast<std::int64_t>(*before)) {
        co_await answer_error(
            ex, base::error{base::errc::precondition_failed, "too late to withdraw the version"});
        co_return;
    }
    auto removed = co_await local_versions(_local, target.bucket)
                       .remove_version(target.bucket, target.key, wanted->text());
    if (removed || absent_code(removed.code()))
        co_await answer_ok(ex, {});
    else
        co_await answer_error(ex, removed.err());
}

// Removes the versions older than `below`: a newer one is acknowledged (or healed) and stands.
io::task<void> shard_service::trim(http::exchange& ex, const rpc_target& target) {
    auto below = stamp::parse(query_value(ex.head().query, "below").value_or(""));
    if (!below) {
        co_await answer_error(ex, base::error{base::errc::invalid_argument, "trim needs below"});
        co_return;
    }
    auto versions = co_await shard_versions(_local, target.bucket, target.key);
    if (!versions) {
        co_await answer_error(ex, versions.err());
        co_return;
    }
    const std::string bound = below->text();
    for (const auto& r : *versions) {
        // The trim compares ids as text: that must order them as their stamps, or it would remove a
        // newer version than the one acknowledged.
        const auto parsed = stamp::parse(r.version_id);
        FJORD_ASSERT(!parsed || (*parsed < *below) == (r.version_id < bound));
        if (r.version_id >= bound) continue;
        auto removed = co_await local_versions(_local, target.bucket)
                           .remove_version(target.bucket, target.key, r.version_id);
        if (!removed && !absent_code(removed.code())) {
            co_await answer_error(ex, removed.err());
            co_return;
        }
    }
    co_await answer_ok(ex, {});
}

io::task<void> shard_service::meta(http::exchange& ex, const rpc_target& target) {
    auto body = co_await read_small_body(ex.body(), 64 * max_rpc_keys + 1024 * 1024);
    if (!body) {
        co_await answer_error(ex, body.err());
        co_return;
    }
    auto keys = decode_key_list(*body);
    if (!keys) {
        co_await answer_error(ex, keys.err());
        co_return;
    }
    std::vector<meta_reply> replies(keys->size());
    for (std::size_t i = 0; i < keys->size(); ++i) {
        auto versions = co_await shard_versions(_local, target.bucket, (*keys)[i]);
        if (!versions) {
            replies[i].kind = meta_reply::state::failed;
            continue;
        }
        bool unreadable = false;
        for (const auto& record : *versions) {
            auto meta = meta_of(record);
            if (meta)
                replies[i].versions.push_back(std::move(*meta));
            else
                unreadable = true;  // a record this node cannot read: it does not answer for it
        }
        if (unreadable) {
            replies[i].versions.clear();
            replies[i].kind = meta_reply::state::failed;
        } else {
            replies[i].kind = replies[i].versions.empty() ? meta_reply::state::absent
                                                          : meta_reply::state::present;
        }
    }
    co_await answer_ok(ex, encode_meta_replies(replies), rebuilding());
}

io::task<void> shard_service::list(http::exchange& ex, const rpc_target& target) {
    const std::string_view query = ex.head().query;
    store::list_request request;
    request.bucket = target.bucket;
    request.prefix = query_value(query, "prefix").value_or("");
    request.start_after = query_value(query, "after").value_or("");
    request.max_keys = static_cast<std::uint32_t>(
        std::clamp<std::uint64_t>(query_number(query, "max").value_or(1000), 1, max_rpc_keys));
    shard_listing listing;
    if (!_local.bucket_exists(target.bucket)) {
        co_await answer_ok(ex, encode_listing(listing), rebuilding());
        co_return;
    }
    auto page = co_await local_versions(_local, request.bucket).list_versions(std::move(request));
    if (!page) {
        co_await answer_error(ex, page.err());
        co_return;
    }
    listing.truncated = page->truncated;
    for (auto& entry : page->entries) {
        auto summary = parse_shard_etag(entry.etag);
        if (entry.is_prefix || entry.delete_marker || !summary) continue;
        listing.entries.push_back({std::move(entry.name), std::move(*summary), entry.modified_ms});
    }
    // A page that stops inside a key's versions ends before that key instead, so that every key in
    // it comes with all its versions (unless the key alone fills the page).
    if (listing.truncated && !listing.entries.empty()) {
        const std::string last = listing.entries.back().key;
        auto first_of_last = std::find_if(listing.entries.begin(), listing.entries.end(),
                                          [&](const listed_shard& e) { return e.key == last; });
        if (first_of_last != listing.entries.begin())
            listing.entries.erase(first_of_last, listing.entries.end());
    }
    co_await answer_ok(ex, encode_listing(listing), rebuilding());
}

namespace {
// A fence names a bucket generation: a shard bucket's name without its namespace ("c.b.g" -> ".b.g").
std::string generation_of(const std::string& shard_bucket) { return shard_bucket.substr(1); }
constexpr std::size_t max_fences = 100'000;
constexpr std::int64_t fence_drain_ms = 10'000;
}  // namespace

bool shard_service::fenced_locked(const std::string& generation) {
    auto it = _fenced_until_ms.find(generation);
    if (it == _fenced_until_ms.end()) return false;
    if (it->second > base::monotonic_now_ns() / 1'000'000) return true;
    _fenced_until_ms.erase(it);
    return false;
}

bool shard_service::fenced(const std::string& shard_bucket) {
    std::lock_guard lock(_fence_mutex);
    return fenced_locked(generation_of(shard_bucket));
}

// The check and the count under one lock: a fence set between them would otherwise be confirmed
// before this commit is counted, and the commit land after the deleter's probe.
base::result<void> shard_service::begin_commit(const std::string& shard_bucket) {
    const std::string generation = generation_of(shard_bucket);
    std::lock_guard lock(_fence_mutex);
    if (fenced_locked(generation))
        return base::fail(base::errc::no_such_bucket, "the bucket is being deleted or was deleted");
    ++_committing[generation];
    return {};
}

void shard_service::end_commit(const std::string& shard_bucket) {
    std::lock_guard lock(_fence_mutex);
    auto it = _committing.find(generation_of(shard_bucket));
    if (it != _committing.end() && --it->second == 0) _committing.erase(it);
}

io::task<void> shard_service::fence(http::exchange& ex, const rpc_target& target) {
    const std::string generation = generation_of(target.bucket);
    const std::int64_t now_ms = base::monotonic_now_ns() / 1'000'000;
    bool full = false;
    {
        std::lock_guard lock(_fence_mutex);
        if (ex.head().method_text == "DELETE") {
            _fenced_until_ms.erase(generation);
        } else {
            for (auto it = _fenced_until_ms.begin(); it != _fenced_until_ms.end();)
                it = it->second <= now_ms ? _fenced_until_ms.erase(it) : std::next(it);
            full = _fenced_until_ms.size() >= max_fences;
            if (!full) _fenced_until_ms[generation] = now_ms + fence_ms;
        }
    }
    if (full) {
        co_await answer_error(ex, base::error{base::errc::slow_down, "too many fences"});
        co_return;
    }
    // Shards that passed their check before the fence commit (or fail) before it is confirmed: the
    // deleter's emptiness probe then sees every shard this node will ever take for the generation.
    for (;;) {
        bool drained = ex.head().method_text == "DELETE";
        if (!drained) {
            std::lock_guard lock(_fence_mutex);
            drained = _committing.count(generation) == 0;
        }
        if (drained) break;
        if (base::monotonic_now_ns() / 1'000'000 - now_ms > fence_drain_ms) {
            co_await answer_error(ex, base::error{base::errc::service_unavailable,
                                                  "shards of the bucket are still committing"});
            co_return;
        }
        co_await io::yield_now{};
    }
    if (ex.head().method_text == "POST" && query_value(ex.head().query, "deleted") && _on_deleted)
        co_await _on_deleted(target.bucket);
    co_await answer_ok(ex, {});
}

io::task<void> shard_service::drop_bucket(http::exchange& ex, const rpc_target& target) {
    // Bounded work per request: the caller repeats until the bucket is gone.
    if (!_local.bucket_exists(target.bucket)) {
        co_await answer_ok(ex, {});
        co_return;
    }
    store::list_request request;
    request.bucket = target.bucket;
    request.max_keys = max_rpc_keys;
    auto page = co_await local_versions(_local, request.bucket).list_versions(std::move(request));
    if (!page) {
        co_await answer_error(ex, page.err());
        co_return;
    }
    for (const auto& entry : page->entries) {
        if (entry.is_prefix) continue;
        auto removed = co_await local_versions(_local, target.bucket)
                           .remove_version(target.bucket, entry.name, entry.version_id);
        if (!removed && !absent_code(removed.code())) {
            co_await answer_error(ex, removed.err());
            co_return;
        }
    }
    if (page->truncated) {
        (void)co_await ex.send_all(202, {}, "more to remove");
        co_return;
    }
    auto dropped = co_await _local.delete_bucket(target.bucket);
    if (dropped || dropped.code() == base::errc::no_such_bucket)
        co_await answer_ok(ex, {});
    else
        co_await answer_error(ex, dropped.err());
}

}  // namespace fjord::cluster

#include "cluster/rpc.h"

#include <cstdio>

#include "base/encoding.h"
#include "cluster/erasure.h"
#include "store/codec.h"

namespace fjord::cluster {

std::string rpc_path(std::string_view op, std::string_view bucket, std::string_view key) {
    std::string path(rpc_prefix);
    path.append(op).append("/").append(base::uri_encode(bucket, false));
    if (!key.empty()) path.append("/").append(base::uri_encode(key, true));
    return path;
}

base::result<rpc_target> parse_rpc_path(std::string_view raw_path) {
    if (!raw_path.starts_with(rpc_prefix))
        return base::fail(base::errc::invalid_argument, "not a cluster request");
    std::string_view rest = raw_path.substr(rpc_prefix.size());
    const std::size_t slash = rest.find('/');
    if (slash == std::string_view::npos || slash == 0)
        return base::fail(base::errc::invalid_argument, "a cluster request names op/bucket");
    rpc_target t;
    t.op = std::string(rest.substr(0, slash));
    rest = rest.substr(slash + 1);
    const std::size_t key_at = rest.find('/');
    auto bucket = base::uri_decode(rest.substr(0, key_at), false);
    if (!bucket || bucket->empty())
        return base::fail(base::errc::invalid_argument, "a cluster request names a bucket");
    t.bucket = std::move(*bucket);
    if (key_at != std::string_view::npos) {
        auto key = base::uri_decode(rest.substr(key_at + 1), false);
        if (!key) return base::fail(base::errc::invalid_argument, "a malformed key");
        t.key = std::move(*key);
    }
    if (t.op == "shard" && t.key.empty())
        return base::fail(base::errc::invalid_argument, "a shard request names a key");
    return t;
}

std::string acceptance::text() const {
    return kind == rule::newer ? std::string("newer") : "at-most " + bound.text();
}

std::optional<acceptance> acceptance::parse(std::string_view text) {
    if (text == "newer") return acceptance{};
    constexpr std::string_view at_most = "at-most ";
    if (!text.starts_with(at_most)) return std::nullopt;
    auto bound = stamp::parse(text.substr(at_most.size()));
    if (!bound) return std::nullopt;
    return acceptance{rule::at_most, *bound};
}

std::vector<std::pair<std::string, std::string>> upload_headers(const upload_head& head) {
    char layout[128];
    std::snprintf(layout, sizeof layout, "%c %u %u %u %u %llu", static_cast<char>(head.kind),
                  head.k, head.m, head.index, static_cast<unsigned>(head.block_bytes),
                  static_cast<unsigned long long>(head.object_bytes));
    return {{"x-fjord-stamp", head.version.text()},
            {"x-fjord-layout", layout},
            {"x-fjord-accept", head.accept.text()}};
}

base::result<upload_head> parse_upload_head(std::string_view stamp_text,
                                            std::string_view layout_text,
                                            std::string_view accept_text) {
    upload_head head;
    auto version = stamp::parse(stamp_text);
    auto accept = acceptance::parse(accept_text);
    if (!version || !accept)
        return base::fail(base::errc::invalid_argument, "a shard upload without a valid stamp");
    head.version = *version;
    head.accept = *accept;
    char kind = 0;
    unsigned k = 0, m = 0, index = 0, block = 0;
    unsigned long long bytes = 0;
    const std::string layout(layout_text);
    int end = 0;
    if (std::sscanf(layout.c_str(), "%c %u %u %u %u %llu%n", &kind, &k, &m, &index, &block, &bytes,
                    &end) != 6 ||
        static_cast<std::size_t>(end) != layout.size() ||
        (kind != 'o' && kind != 'd' && kind != 'm'))
        return base::fail(base::errc::invalid_argument, "a malformed x-fjord-layout");
    head.kind = static_cast<shard_kind>(kind);
    if (k > max_stripe_width || m > max_stripe_width || index > max_stripe_width)
        return base::fail(base::errc::invalid_argument, "a malformed x-fjord-layout");
    head.k = k, head.m = m, head.index = index, head.block_bytes = block, head.object_bytes = bytes;
    // The same bounds a shard's record is held to (decode_shard_meta).
    shard_meta probe;
    probe.version = head.version, probe.kind = head.kind, probe.k = k, probe.m = m;
    probe.index = index, probe.block_bytes = block;
    if (head.kind == shard_kind::deleted && bytes != 0)
        return base::fail(base::errc::invalid_argument, "a tombstone has no bytes");
    if (auto checked = decode_shard_meta(encode_shard_meta(probe)); !checked)
        return checked.as_failure();
    return head;
}

bool matches(const upload_head& head, const shard_meta& meta) {
    return head.version == meta.version && head.kind == meta.kind && head.k == meta.k &&
           head.m == meta.m && head.index == meta.index && head.block_bytes == meta.block_bytes &&
           head.object_bytes == meta.object.size_bytes;
}

std::string trailer_frame(const shard_meta& meta) {
    std::string encoded = encode_shard_meta(meta);
    std::string out;
    store::encoder e(out);
    e.str(encoded);
    return out;
}

std::string encode_key_list(std::span<const std::string> keys) {
    std::string out;
    store::encoder e(out);
    e.u32(static_cast<std::uint32_t>(keys.size()));
    for (const auto& k : keys) e.str(k);
    return out;
}

base::result<std::vector<std::string>> decode_key_list(std::string_view body) {
    store::decoder d(body);
    const std::uint32_t n = d.u32();
    if (!d.ok() || n > max_rpc_keys)
        return base::fail(base::errc::invalid_argument, "a key list of at most 1000 keys");
    std::vector<std::string> keys(n);
    for (auto& k : keys) k = d.str();
    if (!d.ok() || !d.at_end()) return base::fail(base::errc::invalid_argument, "a bad key list");
    return keys;
}

std::string encode_meta_replies(std::span<const meta_reply> replies) {
    std::string out;
    store::encoder e(out);
    e.u32(static_cast<std::uint32_t>(replies.size()));
    for (const auto& r : replies) {
        e.u8(static_cast<std::uint8_t>(r.kind));
        const bool present = r.kind == meta_reply::state::present;
        e.u32(present ? static_cast<std::uint32_t>(r.versions.size()) : 0);
        if (present)
            for (const auto& meta : r.versions) {
                e.u8(meta.damaged ? 1 : 0);
                e.str(encode_shard_meta(meta));
            }
    }
    return out;
}

base::result<std::vector<meta_reply>> decode_meta_replies(std::string_view body,
                                                          std::size_t expected) {
    store::decoder d(body);
    const std::uint32_t n = d.u32();
    if (!d.ok() || n != expected)
        return base::fail(base::errc::invalid_argument, "a meta answer of the wrong length");
    std::vector<meta_reply> replies(n);
    for (auto& r : replies) {
        const std::uint8_t kind = d.u8();
        const std::uint32_t versions = d.u32();
        if (!d.ok() || kind > 2 || versions > max_versions_per_key ||
            (kind != 1 && versions != 0) || (kind == 1 && versions == 0))
            return base::fail(base::errc::invalid_argument, "a bad meta answer");
        r.kind = static_cast<meta_reply::state>(kind);
        for (std::uint32_t v = 0; v < versions; ++v) {
            const bool damaged = d.u8() != 0;
            auto decoded = decode_shard_meta(d.str());
            if (!d.ok() || !decoded)
                return base::fail(base::errc::invalid_argument, "a bad meta answer");
            decoded->damaged = damaged;
            r.versions.push_back(std::move(*decoded));
        }
    }
    if (!d.at_end()) return base::fail(base::errc::invalid_argument, "a bad meta answer");
    return replies;
}

std::string encode_listing(const shard_listing& listing) {
    std::string out;
    store::encoder e(out);
    e.u8(listing.truncated ? 1 : 0);
    e.u32(static_cast<std::uint32_t>(listing.entries.size()));
    for (const auto& entry : listing.entries) {
        e.str(entry.key);
        shard_meta probe;
        probe.version = entry.summary.version;
        probe.kind = entry.summary.kind;
        probe.object.size_bytes = entry.summary.object_bytes;
        probe.object.etag = entry.summary.object_etag;
        e.str(shard_etag(probe));
        e.i64(entry.modified_ms);
    }
    return out;
}

base::result<shard_listing> decode_listing(std::string_view body) {
    store::decoder d(body);
    shard_listing listing;
    listing.truncated = d.u8() != 0;
    const std::uint32_t n = d.u32();
    if (!d.ok() || n > max_rpc_keys)
        return base::fail(base::errc::invalid_argument, "a bad listing");
    listing.entries.resize(n);
    for (auto& entry : listing.entries) {
        entry.key = d.str();
        const std::string etag = d.str();
        entry.modified_ms = d.i64();
        auto summary = parse_shard_etag(etag);
        if (!d.ok() || !summary) return base::fail(base::errc::invalid_argument, "a bad listing");
        entry.summary = std::move(*summary);
    }
    if (!d.at_end()) return base::fail(base::errc::invalid_argument, "a bad listing");
    return listing;
}

}  // namespace fjord::cluster

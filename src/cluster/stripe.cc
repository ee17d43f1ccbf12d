#include "cluster/stripe.h"

#include <algorithm>

#include "base/encoding.h"
#include "cluster/erasure.h"
#include "store/codec.h"

namespace fjord::cluster {

namespace {

constexpr std::uint8_t meta_format = 1;
constexpr std::uint32_t min_block_bytes = 64;
constexpr std::uint32_t max_block_bytes = 16 * 1024 * 1024;

constexpr std::uint32_t max_manifest_parts = 10'000;
constexpr std::uint64_t max_object_bytes = 5ULL << 40;  // S3's largest object: 5 TiB

// A manifest's upload and parts: ascending part numbers whose sizes add up to the object's.
base::result<void> decode_parts(store::decoder& d, shard_meta& meta) {
    meta.upload_id = d.str();
    const std::uint32_t n = d.u32();
    if (!d.ok() || n > max_manifest_parts)
        return base::fail(base::errc::invalid_argument, "a manifest with too many parts");
    std::uint64_t total = 0;
    for (std::uint32_t i = 0; i < n && d.ok(); ++i) {
        manifest_part p;
        p.number = d.u32();
        p.version.time = d.u64();
        p.version.node = d.u32();
        p.size_bytes = d.u64();
        if (!meta.parts.empty() && p.number <= meta.parts.back().number)
            return base::fail(base::errc::invalid_argument, "a manifest's parts out of order");
        total += p.size_bytes;
        meta.parts.push_back(p);
    }
    if (d.ok() && total != meta.object.size_bytes)
        return base::fail(base::errc::invalid_argument, "a manifest's parts do not add up");
    return {};
}

}  // namespace

std::uint64_t stripe_layout::stripes() const {
    const std::uint64_t per = stripe_data_bytes();
    return object_bytes / per + (object_bytes % per != 0 ? 1 : 0);
}

std::uint32_t stripe_layout::block_of(std::uint64_t s) const {
    const std::uint64_t rest = object_bytes - data_offset(s);
    if (rest >= stripe_data_bytes()) return block_bytes;
    return static_cast<std::uint32_t>((rest + k - 1) / k);
}

std::uint64_t stripe_layout::data_in(std::uint64_t s) const {
    return std::min(stripe_data_bytes(), object_bytes - data_offset(s));
}

std::uint64_t stripe_layout::shard_bytes() const {
    const std::uint64_t n = stripes();
    if (n == 0) return 0;
    return shard_offset(n - 1) + block_of(n - 1);
}

std::string encode_shard_meta(const shard_meta& meta) {
    std::string out;
    store::encoder e(out);
    e.u8(meta_format);
    e.u64(meta.version.time);
    e.u32(meta.version.node);
    e.u8(static_cast<std::uint8_t>(meta.kind));
    e.u8(static_cast<std::uint8_t>(meta.k));
    e.u8(static_cast<std::uint8_t>(meta.m));
    e.u8(static_cast<std::uint8_t>(meta.index));
    e.u32(meta.block_bytes);
    store::object_record object = meta.object;
    object.segments.clear();
    object.inline_data.clear();
    // Length-prefixed: a record's encoding ends with optional fields that run to the end of its input.
    std::string encoded_object;
    store::encoder oe(encoded_object);
    store::encode(oe, object);
    e.str(encoded_object);
    e.u32(static_cast<std::uint32_t>(meta.block_crcs.size()));
    for (std::uint32_t crc : meta.block_crcs) e.u32(crc);
    if (meta.kind == shard_kind::manifest) {
        e.str(meta.upload_id);
        e.u32(static_cast<std::uint32_t>(meta.parts.size()));
        for (const auto& p : meta.parts) {
            e.u32(p.number);
            e.u64(p.version.time);
            e.u32(p.version.node);
            e.u64(p.size_bytes);
        }
    }
    return out;
}

base::result<shard_meta> decode_shard_meta(std::string_view bytes) {
    store::decoder d(bytes);
    shard_meta meta;
    if (d.u8() != meta_format)
        return base::fail(base::errc::invalid_argument, "unknown shard record format");
    meta.version.time = d.u64();
    meta.version.node = d.u32();
    const std::uint8_t kind = d.u8();
    meta.k = d.u8();
    meta.m = d.u8();
    meta.index = d.u8();
    meta.block_bytes = d.u32();
    const std::string encoded_object = d.str();
    store::decoder od(encoded_object);
    const bool decoded = d.ok() && store::decode(od, meta.object) && od.at_end();
    const std::uint32_t crcs = d.u32();
    if (!d.ok() || !decoded)
        return base::fail(base::errc::invalid_argument, "truncated shard record");
    if (kind != 'o' && kind != 'd' && kind != 'm')
        return base::fail(base::errc::invalid_argument, "unknown shard kind");
    meta.kind = static_cast<shard_kind>(kind);
    if (meta.k < 1 || meta.k + meta.m > max_stripe_width || meta.index >= meta.k + meta.m)
        return base::fail(base::errc::invalid_argument, "bad geometry in a shard record");
    if (meta.block_bytes < min_block_bytes || meta.block_bytes > max_block_bytes)
        return base::fail(base::errc::invalid_argument, "bad block size in a shard record");
    if (meta.object.size_bytes > max_object_bytes)
        return base::fail(base::errc::invalid_argument, "an object too large in a shard record");
    if (crcs != meta.layout().stripes() || crcs > bytes.size() / 4)
        return base::fail(base::errc::invalid_argument, "the shard record's CRCs do not match");
    meta.block_crcs.resize(crcs);
    for (auto& crc : meta.block_crcs) crc = d.u32();
    if (meta.kind == shard_kind::manifest) FJORD_TRY(decode_parts(d, meta));
    if (!d.ok() || !d.at_end())
        return base::fail(base::errc::invalid_argument, "truncated shard record");
    return meta;
}

std::string shard_etag(const shard_meta& meta) {
    return meta.version.text() + static_cast<char>(meta.kind) +
           std::to_string(meta.object.size_bytes) + ":" + meta.object.etag;
}

std::optional<shard_summary> parse_shard_etag(std::string_view etag) {
    if (etag.size() < stamp::text_bytes + 3) return std::nullopt;
    auto version = stamp::parse(etag.substr(0, stamp::text_bytes));
    const char kind = etag[stamp::text_bytes];
    if (!version || (kind != 'o' && kind != 'd' && kind != 'm')) return std::nullopt;
    std::string_view rest = etag.substr(stamp::text_bytes + 1);
    const std::size_t colon = rest.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    auto size = base::parse_u64(rest.substr(0, colon));
    if (!size) return std::nullopt;
    return shard_summary{*version, static_cast<shard_kind>(kind), *size,
                         std::string(rest.substr(colon + 1))};
}

std::string shard_bucket(std::string_view bucket, std::string_view generation, char space) {
    return std::string(1, space) + "." + std::string(bucket) + "." + std::string(generation);
}

}  // namespace fjord::cluster

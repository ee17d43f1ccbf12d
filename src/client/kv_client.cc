#include "client/kv_client.h"

#include <algorithm>

#include "base/checksum.h"
#include "base/kv_wire.h"
#include "io/wait_group.h"

namespace fjord::client {

namespace wire = base::kv_wire;

namespace {

base::failure bad_response(std::string what) {
    return base::fail(base::errc::bad_request, "malformed KV batch response: " + what);
}

base::result<void> check_keys(const std::vector<std::string>& keys) {
    for (const auto& k : keys)
        if (k.empty() || k.size() > wire::max_key_bytes)
            return base::fail(base::errc::invalid_argument,
                              "a KV key is 1 to " + std::to_string(wire::max_key_bytes) + " bytes");
    return {};
}

io::task<base::result<wire::frame_header>> read_header(response_stream& in, wire::op o,
                                                       std::size_t count) {
    std::array<std::byte, wire::header_bytes> raw;
    FJORD_CO_TRY(co_await in.read_exact(raw.data(), raw.size()));
    auto h = wire::decode_header(raw.data());
    if (h.magic != wire::response_magic || h.version != wire::version ||
        h.op != static_cast<std::uint16_t>(o) || h.count != count)
        co_return bad_response("bad header");
    co_return h;
}

// Requests of consecutive keys, each with at most max_keys keys and about request_bytes of values.
// ... and a table of at most max_table_bytes.
std::vector<std::pair<std::size_t, std::size_t>> split(const std::vector<std::string>& keys,
                                                       const std::vector<std::uint64_t>& sizes,
                                                       std::uint64_t request_bytes) {
    std::vector<std::pair<std::size_t, std::size_t>> groups;
    std::size_t start = 0;
    std::uint64_t bytes = 0, table = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        const std::uint64_t entry = wire::entry_fixed_bytes + keys[i].size();
        if (i > start && (i - start == wire::max_keys || bytes + sizes[i] > request_bytes ||
                          table + entry > wire::max_table_bytes)) {
            groups.emplace_back(start, i);
            start = i;
            bytes = table = 0;
        }
        bytes += sizes[i];
        table += entry;
    }
    if (start < sizes.size()) groups.emplace_back(start, sizes.size());
    return groups;
}

std::vector<wire::entry> entries_of(const std::vector<std::string>& keys, std::size_t from,
                                    std::size_t to) {
    std::vector<wire::entry> entries;
    entries.reserve(to - from);
    for (std::size_t i = from; i < to; ++i) entries.push_back({keys[i], 0, 0});
    return entries;
}

struct get_job {
    object_client* client;
    std::string bucket;
    const std::vector<std::string>* keys;
    const std::vector<std::span<std::byte>>* destinations;
    std::vector<kv_outcome>* out;
    base::result<void> status;
};

io::task<base::result<void>> read_get_results(response_stream& in, get_job* job, std::size_t from,
                                              std::size_t to) {
    FJORD_CO_TRY(co_await read_header(in, wire::op::get, to - from));
    for (std::size_t i = from; i < to; ++i) {
        std::array<std::byte, wire::get_result_bytes> r;
        FJORD_CO_TRY(co_await in.read_exact(r.data(), r.size()));
        auto status = static_cast<wire::status>(r[0]);
        std::uint32_t crc = wire::get32(r.data() + 4);
        std::uint64_t size = wire::get64(r.data() + 8);
        kv_outcome& o = (*job->out)[i];
        o.size_bytes = size;
        std::span<std::byte> dst = (*job->destinations)[i];
        if (status != wire::status::ok) {
            o.status = status == wire::status::absent ? kv_status::absent : kv_status::failed;
            FJORD_CO_TRY(co_await in.skip(size));
            continue;
        }
        if (size > dst.size()) {
            o.status = kv_status::too_small;
            FJORD_CO_TRY(co_await in.skip(size));
            continue;
        }
        FJORD_CO_TRY(co_await in.read_exact(dst.data(), size));
        o.status = base::crc32c(dst.subspan(0, size)) == crc ? kv_status::ok : kv_status::corrupt;
    }
    if (in.remaining_bytes() != 0) co_return bad_response("bytes after the last block");
    co_return base::result<void>{};
}

io::task<void> get_group(get_job* job, std::size_t from, std::size_t to) {
    auto request = wire::encode_request(wire::op::get, entries_of(*job->keys, from, to));
    iovec part{request.data(), request.size()};
    response_consumer consume = [job, from, to](response_stream& in) {
        return read_get_results(in, job, from, to);
    };
    auto done = co_await job->client->kv_batch(job->bucket, "get", std::span(&part, 1), consume);
    if (!done && job->status) job->status = done.as_failure();
}

struct put_job {
    object_client* client;
    std::string bucket;
    const std::vector<std::string>* keys;
    const std::vector<std::span<const std::byte>>* values;
    const std::vector<std::uint32_t>* crcs;
    std::vector<kv_outcome>* out;
    base::result<void> status;
};

io::task<base::result<void>> read_put_results(response_stream& in, put_job* job, std::size_t from,
                                              std::size_t to) {
    FJORD_CO_TRY(co_await read_header(in, wire::op::put, to - from));
    for (std::size_t i = from; i < to; ++i) {
        std::array<std::byte, wire::put_result_bytes> r;
        FJORD_CO_TRY(co_await in.read_exact(r.data(), r.size()));
        kv_outcome& o = (*job->out)[i];
        auto status = static_cast<wire::status>(r[0]);
        o.status = status == wire::status::ok       ? kv_status::ok
                   : status == wire::status::absent ? kv_status::absent
                                                    : kv_status::failed;
        o.error_code = wire::get32(r.data() + 4);
        o.size_bytes = (*job->values)[i].size();
    }
    if (in.remaining_bytes() != 0) co_return bad_response("bytes after the last result");
    co_return base::result<void>{};
}

io::task<void> put_group(put_job* job, std::size_t from, std::size_t to) {
    std::vector<wire::entry> entries;
    entries.reserve(to - from);
    for (std::size_t i = from; i < to; ++i)
        entries.push_back({(*job->keys)[i], (*job->crcs)[i], (*job->values)[i].size()});
    auto request = wire::encode_request(wire::op::put, entries);
    std::vector<iovec> parts;
    parts.reserve(to - from + 1);
    parts.push_back(iovec{request.data(), request.size()});
    for (std::size_t i = from; i < to; ++i)
        parts.push_back(iovec{const_cast<std::byte*>((*job->values)[i].data()),  // only read
                              (*job->values)[i].size()});
    response_consumer consume = [job, from, to](response_stream& in) {
        return read_put_results(in, job, from, to);
    };
    auto done = co_await job->client->kv_batch(job->bucket, "put", parts, consume);
    if (!done && job->status) job->status = done.as_failure();
}

}  // namespace

io::task<base::result<kv_exists_result>> kv_exists(object_client& client, std::string bucket,
                                                   std::vector<std::string> keys) {
    FJORD_CO_TRY(check_keys(keys));
    kv_exists_result out;
    out.sizes.resize(keys.size());
    bool leading = true;
    const std::vector<std::uint64_t> no_values(keys.size(), 0);
    for (auto range : split(keys, no_values, UINT64_MAX)) {
        const std::size_t from = range.first, to = range.second;
        auto request = wire::encode_request(wire::op::exists, entries_of(keys, from, to));
        iovec part{request.data(), request.size()};
        response_consumer consume = [&out, from,
                                     to](response_stream& in) -> io::task<base::result<void>> {
            auto h = co_await read_header(in, wire::op::exists, to - from);
            if (!h) co_return h.as_failure();
            std::vector<std::byte> results((to - from) * wire::exists_result_bytes);
            FJORD_CO_TRY(co_await in.read_exact(results.data(), results.size()));
            for (std::size_t i = from; i < to; ++i) {
                const std::byte* r = results.data() + (i - from) * wire::exists_result_bytes;
                if (static_cast<wire::status>(r[0]) == wire::status::ok)
                    out.sizes[i] = wire::get64(r + 8);
                else
                    out.sizes[i].reset();
            }
            co_return base::result<void>{};
        };
        FJORD_CO_TRY(co_await client.kv_batch(bucket, "exists", std::span(&part, 1), consume));
    }
    for (const auto& size : out.sizes) {
        if (!size) leading = false;
        if (leading) ++out.leading_hits;
    }
    co_return out;
}

io::task<base::result<std::vector<kv_outcome>>> kv_get_into(
    object_client& client, std::string bucket, std::vector<std::string> keys,
    std::vector<std::span<std::byte>> destinations, kv_batch_options options) {
    FJORD_CO_TRY(check_keys(keys));
    if (keys.size() != destinations.size())
        co_return base::fail(base::errc::invalid_argument, "one destination per key");
    std::vector<kv_outcome> out(keys.size());
    std::vector<std::uint64_t> sizes;
    for (const auto& d : destinations) sizes.push_back(d.size());
    get_job job{&client, bucket, &keys, &destinations, &out, {}};
    io::wait_group requests(std::max(1u, options.requests_in_flight));
    for (auto [from, to] : split(keys, sizes, options.request_bytes))
        co_await requests.spawn(get_group(&job, from, to));
    co_await requests.wait();
    if (!job.status) co_return job.status.as_failure();
    co_return out;
}

io::task<base::result<std::vector<kv_outcome>>> kv_put_from(
    object_client& client, std::string bucket, std::vector<std::string> keys,
    std::vector<std::span<const std::byte>> values, kv_batch_options options) {
    FJORD_CO_TRY(check_keys(keys));
    if (keys.size() != values.size())
        co_return base::fail(base::errc::invalid_argument, "one value per key");
    std::vector<kv_outcome> out(keys.size());
    std::vector<std::uint64_t> sizes;
    std::vector<std::uint32_t> crcs;
    for (const auto& v : values) {
        sizes.push_back(v.size());
        crcs.push_back(base::crc32c(v));
    }
    put_job job{&client, bucket, &keys, &values, &crcs, &out, {}};
    io::wait_group requests(std::max(1u, options.requests_in_flight));
    for (auto [from, to] : split(keys, sizes, options.request_bytes))
        co_await requests.spawn(put_group(&job, from, to));
    co_await requests.wait();
    if (!job.status) co_return job.status.as_failure();
    co_return out;
}

}  // namespace fjord::client

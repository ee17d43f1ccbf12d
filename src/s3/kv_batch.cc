// The KV batch API (base/kv_wire.h, docs/kv.md): exists, get and put of many blocks of a KV bucket in
// one request, with no per-block round trip. The request is authenticated like any S3 request; blocks
// of a put carry their CRC32C in the table, checked before anything is stored, so a put is sent with
// UNSIGNED-PAYLOAD (a SHA-256 of a gigabyte of blocks would cost more than the transfer).

#include <algorithm>
#include <cstring>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/digest.h"
#include "base/encoding.h"
#include "base/kv_wire.h"
#include "io/wait_group.h"
#include "s3/operations.h"

namespace fjord::s3 {

namespace wire = base::kv_wire;

namespace {

constexpr std::size_t crc_block_bytes = 1024 * 1024;  // as the KV tier's S3 PUT (the ETag's CRCs)
constexpr std::size_t staging_bytes = 64 * 1024;      // small pieces of a response, sent together
constexpr std::size_t puts_in_flight = 8;
constexpr std::size_t get_window_keys = 256;
constexpr std::uint64_t get_window_bytes = 16 * 1024 * 1024;

auto malformed(std::string what) {
    return base::error{base::errc::invalid_request, "malformed KV batch: " + std::move(what)};
}

io::task<base::result<void>> read_exact(http::body_reader& body, std::byte* dst, std::size_t len) {
    std::size_t got = 0;
    while (got < len) {
        auto n = co_await body.read(dst + got, len - got);
        if (!n) co_return n.as_failure();
        if (*n == 0)
            co_return base::fail(base::errc::incomplete_body, "the batch body ended early");
        got += *n;
    }
    co_return base::result<void>{};
}

// Response bytes on their way out, sent in one SENDMSG per batch of pieces: small pieces (the per-block
// results) are copied into a staging buffer, values are named where they lie, so a block's bytes are
// copied once, by the kernel, on their way to the socket. A value handed to write() must stay alive
// until the next flush(); send_window flushes before the blocks it names are let go.
class batch_writer {
public:
    explicit batch_writer(http::exchange& ex) : _ex(ex) {
        _staged.reserve(staging_bytes);  // never reallocated: pieces point into it
        _pieces.reserve(max_pieces);
    }
    io::task<base::result<void>> write(std::span<const std::byte> data) {
        if (data.empty()) co_return base::result<void>{};
        if (_pieces.size() == max_pieces || _pending + data.size() > flush_bytes)
            FJORD_CO_TRY(co_await flush());
        if (data.size() <= small_piece_bytes) {
            if (_staged.size() + data.size() > staging_bytes) FJORD_CO_TRY(co_await flush());
            std::byte* at = _staged.data() + _staged.size();
            _staged.insert(_staged.end(), data.begin(), data.end());
            // Consecutive small pieces are one iovec.
            if (!_pieces.empty() &&
                static_cast<std::byte*>(_pieces.back().iov_base) + _pieces.back().iov_len == at)
                _pieces.back().iov_len += data.size();
            else
                _pieces.push_back({at, data.size()});
        } else {
            _pieces.push_back({const_cast<std::byte*>(data.data()), data.size()});
        }
        _pending += data.size();
        co_return base::result<void>{};
    }
    io::task<base::result<void>> zeros(std::uint64_t count) {
        static const std::vector<std::byte> zero(64 * 1024);
        while (count > 0) {
            auto n = std::min<std::uint64_t>(count, zero.size());
            FJORD_CO_TRY(co_await write(std::span(zero.data(), n)));
            count -= n;
        }
        co_return base::result<void>{};
    }
    io::task<base::result<void>> flush() {
        if (_pieces.empty()) co_return base::result<void>{};
        auto sent = co_await _ex.send_body_gather(_pieces);
        _pieces.clear();
        _staged.clear();
        _pending = 0;
        co_return sent;
    }

private:
    static constexpr std::size_t small_piece_bytes = 4096;
    static constexpr std::size_t max_pieces = 64;
    static constexpr std::uint64_t flush_bytes = 4 * 1024 * 1024;
    http::exchange& _ex;
    std::vector<std::byte> _staged;
    std::vector<iovec> _pieces;
    std::uint64_t _pending = 0;
};

std::array<std::byte, wire::header_bytes> response_header(wire::op o, std::uint32_t count,
                                                          std::uint32_t leading_hits) {
    std::array<std::byte, wire::header_bytes> h;
    wire::encode_header(h.data(), {wire::response_magic, wire::version,
                                   static_cast<std::uint16_t>(o), count, leading_hits});
    return h;
}

std::uint32_t leading(const std::vector<std::optional<std::uint64_t>>& sizes) {
    std::uint32_t n = 0;
    while (n < sizes.size() && sizes[n]) ++n;
    return n;
}

// The CRC32C of a value and the per-MiB CRCs its ETag derives from.
std::uint32_t value_crcs(std::span<const std::byte> value, std::vector<std::uint32_t>& crcs) {
    std::uint32_t whole = 0;
    for (std::size_t at = 0; at < value.size(); at += crc_block_bytes) {
        auto block = value.subspan(at, std::min(crc_block_bytes, value.size() - at));
        crcs.push_back(base::crc32c(block));
        whole = base::crc32c_combine(whole, crcs.back(), block.size());
    }
    return value.empty() ? base::crc32c({}) : whole;
}

struct put_slot {
    wire::status status = wire::status::failed;
    std::uint32_t code = 0;
};

io::task<void> store_one(store::block_store* blocks, std::string bucket, std::string key,
                         std::shared_ptr<store::block_buffer> bytes, store::object_record record,
                         put_slot* slot) {
    store::write_conditions if_absent;
    if_absent.if_none_match_any = true;
    auto written = co_await blocks->write_block(std::move(bucket), std::move(key), std::move(bytes),
                                                std::move(record), if_absent);
    if (!written) {
        slot->status = wire::status::failed;
        slot->code = static_cast<std::uint32_t>(written.err().code);
    } else {
        slot->status = *written ? wire::status::ok : wire::status::absent;
    }
}

// The header and table must be the ones the signature covers (base/kv_wire.h): their SHA-256 is in a
// signed header. Checked before anything is looked up or stored.
base::result<void> check_head_signed(const http::request_head& head, const auth::auth_result& auth,
                                     std::span<const std::byte> header_bytes,
                                     std::span<const std::byte> table) {
    const http::header* claimed = head.find(wire::head_sha256_header);
    if (!claimed || !auth.signs(wire::head_sha256_header))
        return base::fail(base::errc::access_denied,
                          "a batch request signs the SHA-256 of its header and table in " +
                              std::string(wire::head_sha256_header));
    base::digest sha(base::digest_kind::sha256);
    sha.update(header_bytes);
    sha.update(table);
    if (base::to_lower(claimed->value) != base::hex_encode(sha.finish()))
        return base::fail(
            base::errc::content_sha256_mismatch,
            "The batch's header and table do not match " + std::string(wire::head_sha256_header));
    return {};
}

}  // namespace

io::task<void> kv_batch(context& c) {
    store::block_store* blocks = c.svc.store().blocks_of(c.req.bucket);
    if (blocks == nullptr) {
        if (!c.svc.store().bucket_exists(c.req.bucket))
            co_return co_await send_error(c, {base::errc::no_such_bucket, "no such bucket"});
        co_return co_await send_error(c, {base::errc::invalid_request,
                                          "the batch API serves KV buckets only (fjord mb --kv)"});
    }
    auto op = wire::op_named(c.req.param("fjord-batch"));
    if (!op) co_return co_await send_error(c, malformed("fjord-batch must be exists, get or put"));
    std::array<std::byte, wire::header_bytes> head_bytes;
    if (auto r = co_await read_exact(c.ex.body(), head_bytes.data(), head_bytes.size()); !r)
        co_return co_await send_error(c, malformed("no frame header"));
    wire::frame_header h = wire::decode_header(head_bytes.data());
    if (h.magic != wire::request_magic || h.version != wire::version ||
        h.op != static_cast<std::uint16_t>(*op))
        co_return co_await send_error(c,
                                      malformed("bad magic, version or operation in the header"));
    if (h.count == 0 || h.count > wire::max_keys || h.fourth > wire::max_table_bytes)
        co_return co_await send_error(
            c,
            malformed("1 to " + std::to_string(wire::max_keys) + " keys and a table of at most " +
                      std::to_string(wire::max_table_bytes) + " bytes are allowed"));
    std::vector<std::byte> table(h.fourth);
    if (auto r = co_await read_exact(c.ex.body(), table.data(), table.size()); !r)
        co_return co_await send_error(c, malformed("the table is cut short"));
    if (auto signed_head = check_head_signed(c.ex.head(), c.auth, head_bytes, table); !signed_head)
        co_return co_await send_error(c, signed_head.err());
    std::vector<wire::entry> entries;
    if (auto bad = wire::decode_table(table, h.count, *op, entries))
        co_return co_await send_error(c, malformed(*bad));
    // Keys obey the S3 rule (UTF-8), so that every key a batch stores lists back in a well-formed
    // document, as keys stored by PUT do.
    for (std::size_t i = 0; i < entries.size(); ++i)
        if (!base::is_valid_utf8(entries[i].key))
            co_return co_await send_error(
                c, malformed("the key of entry " + std::to_string(i) + " is not UTF-8"));
    if (*op == wire::op::put) co_return co_await kv_batch_put(c, *blocks, std::move(entries));
    // exists and get take no values: nothing may follow the table.
    std::byte extra[1];
    auto more = co_await c.ex.body().read(extra, 1);
    if (!more || *more != 0)
        co_return co_await send_error(
            c, malformed("bytes after the table of a batch " + std::string(wire::op_name(*op))));
    std::vector<std::string> keys;
    keys.reserve(entries.size());
    for (auto& e : entries) keys.push_back(std::move(e.key));
    auto sizes = co_await blocks->sizes(c.req.bucket, keys);
    if (!sizes) co_return co_await send_error(c, sizes.err());
    if (*op == wire::op::exists) co_return co_await kv_batch_exists(c, *sizes);
    co_return co_await kv_batch_get(c, *blocks, keys, *sizes);
}

io::task<void> kv_batch_exists(context& c, const std::vector<std::optional<std::uint64_t>>& sizes) {
    const auto count = static_cast<std::uint32_t>(sizes.size());
    std::vector<std::byte> body(wire::header_bytes + count * wire::exists_result_bytes);
    auto header = response_header(wire::op::exists, count, leading(sizes));
    std::memcpy(body.data(), header.data(), header.size());
    std::byte* p = body.data() + wire::header_bytes;
    for (const auto& size : sizes) {
        p[0] = static_cast<std::byte>(size ? wire::status::ok : wire::status::absent);
        wire::put64(p + 8, size.value_or(0));
        p += wire::exists_result_bytes;
    }
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", "application/x-fjord-kv");
    (void)co_await c.ex.send_all(
        200, headers, std::string_view(reinterpret_cast<const char*>(body.data()), body.size()));
}

// Every block's length is known before the first is sent (Content-Length); a block that leaves between
// the lookup and its read (evicted, or dropped as corrupt) is sent as that many zeros with status
// failed, so the framing holds.
namespace {
// Sends the results of keys [from, to), whose present blocks are `blocks`, in order.
io::task<base::result<void>> send_window(batch_writer& out,
                                         const std::vector<std::optional<std::uint64_t>>& sizes,
                                         const std::vector<store::block_ref>& blocks,
                                         std::size_t from, std::size_t to) {
    std::size_t next_block = 0;
    for (std::size_t i = from; i < to; ++i) {
        std::array<std::byte, wire::get_result_bytes> result{};
        if (!sizes[i]) {
            result[0] = static_cast<std::byte>(wire::status::absent);
            FJORD_CO_TRY(co_await out.write(result));
            continue;
        }
        const store::block_ref& block = blocks[next_block++];
        const bool same = block && block->value().size() == *sizes[i];
        result[0] = static_cast<std::byte>(same ? wire::status::ok : wire::status::failed);
        wire::put32(result.data() + 4, same ? block->value_crc : 0);
        wire::put64(result.data() + 8, *sizes[i]);
        FJORD_CO_TRY(co_await out.write(result));
        FJORD_CO_TRY(same ? co_await out.write(block->value()) : co_await out.zeros(*sizes[i]));
    }
    co_return co_await out.flush();  // before the caller lets `blocks` go
}
// Keys [from, to) of a batch get, and those of them present (in order): at most get_window_keys keys and
// about get_window_bytes. Empty (from == to) past the last key.
struct window {
    std::size_t from = 0;
    std::size_t to = 0;
    std::vector<std::string> wanted;
};

window next_window(const std::vector<std::string>& keys,
                   const std::vector<std::optional<std::uint64_t>>& sizes, std::size_t from) {
    window w{from, from, {}};
    std::uint64_t bytes = 0;
    while (w.to < keys.size() && w.to - from < get_window_keys &&
           (w.to == from || bytes + sizes[w.to].value_or(0) <= get_window_bytes)) {
        bytes += sizes[w.to].value_or(0);
        if (sizes[w.to]) w.wanted.push_back(keys[w.to]);
        ++w.to;
    }
    return w;
}

io::task<void> fetch_window(store::block_store* blocks, std::string bucket,
                            std::vector<std::string> wanted,
                            base::result<std::vector<store::block_ref>>* out) {
    *out = co_await blocks->read_blocks(std::move(bucket), std::move(wanted));
}
}  // namespace

io::task<void> kv_batch_get(context& c, store::block_store& blocks_store,
                            const std::vector<std::string>& keys,
                            const std::vector<std::optional<std::uint64_t>>& sizes) {
    std::uint64_t length = wire::header_bytes;
    for (const auto& size : sizes) length += wire::get_result_bytes + size.value_or(0);
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", "application/x-fjord-kv");
    if (!co_await c.ex.send_head(200, headers, length)) co_return;
    batch_writer out(c.ex);
    auto header =
        response_header(wire::op::get, static_cast<std::uint32_t>(keys.size()), leading(sizes));
    if (!co_await out.write(header)) co_return;
    // Windows of consecutive keys: each window's blocks are fetched in one message per owner core, and
    // the next window is fetched while this one is sent, so the drive and the socket work at once. Two
    // windows of at most get_window_bytes each are the memory a request holds.
    window current = next_window(keys, sizes, 0);
    base::result<std::vector<store::block_ref>> blocks = std::vector<store::block_ref>{};
    if (!current.wanted.empty())
        blocks = co_await blocks_store.read_blocks(c.req.bucket, std::move(current.wanted));
    for (;;) {
        if (!blocks) {  // the head is sent: only closing the connection can say it
            c.ex.close_after();
            co_return;
        }
        window following = next_window(keys, sizes, current.to);
        base::result<std::vector<store::block_ref>> prefetched = std::vector<store::block_ref>{};
        io::wait_group prefetch(1);
        if (!following.wanted.empty())
            co_await prefetch.spawn(fetch_window(&blocks_store, c.req.bucket,
                                                 std::move(following.wanted), &prefetched));
        auto sent = co_await send_window(out, sizes, *blocks, current.from, current.to);
        co_await prefetch.wait();  // `prefetched` is written until then
        if (!sent) {
            c.ex.close_after();
            co_return;
        }
        if (following.from == following.to) break;
        current = std::move(following);
        blocks = std::move(prefetched);
    }
    (void)co_await out.flush();
}

io::task<void> kv_batch_put(context& c, store::block_store& blocks,
                            std::vector<wire::entry> entries) {
    if (c.ex.head().value_of("x-amz-content-sha256") != auth::unsigned_payload_value)
        co_return co_await send_error(
            c, malformed("a batch put is sent with x-amz-content-sha256: UNSIGNED-PAYLOAD (each "
                         "block carries its CRC32C)"));
    // Every size is checked before any value is read or memory taken for it.
    const std::uint64_t max_block =
        std::min(blocks.max_block_bytes(c.req.bucket), c.svc.options().max_object_bytes);
    for (std::size_t i = 0; i < entries.size(); ++i)
        if (entries[i].value_bytes > max_block)
            co_return co_await send_error(
                c, {base::errc::entity_too_large,
                    "block " + std::to_string(i) + " of the batch is larger than the " +
                        std::to_string(max_block) + " bytes a block of this bucket may have"});
    std::vector<put_slot> slots(entries.size());
    io::wait_group writes(puts_in_flight);
    base::result<void> body_ok;
    for (std::size_t i = 0; i < entries.size() && body_ok; ++i) {
        auto& e = entries[i];
        auto bytes = store::block_buffer::allocate(e.value_bytes);
        body_ok = co_await read_exact(c.ex.body(), bytes->value().data(), e.value_bytes);
        if (!body_ok) break;
        std::vector<std::uint32_t> crcs;
        bytes->value_crc = value_crcs(bytes->value(), crcs);
        if (bytes->value_crc != e.value_crc) {
            slots[i].code = static_cast<std::uint32_t>(base::errc::bad_digest);
            continue;
        }
        store::object_record record;
        record.size_bytes = e.value_bytes;
        record.modified_ms = base::unix_now_ms();
        record.content_type = "application/octet-stream";
        record.etag = derived_etag(store::written_data{e.value_bytes, crcs});
        co_await writes.spawn(store_one(&blocks, c.req.bucket, std::move(e.key), std::move(bytes),
                                        std::move(record), &slots[i]));
    }
    co_await writes.wait();
    if (!body_ok) co_return co_await send_error(c, body_ok.err());
    std::byte extra[1];
    auto more = co_await c.ex.body().read(extra, 1);
    if (!more || *more != 0)
        co_return co_await send_error(c, malformed("bytes after the last block of a batch put"));
    const auto count = static_cast<std::uint32_t>(slots.size());
    std::uint32_t stored_leading = 0;
    while (stored_leading < count && slots[stored_leading].status != wire::status::failed)
        ++stored_leading;
    std::vector<std::byte> body(wire::header_bytes + count * wire::put_result_bytes);
    auto header = response_header(wire::op::put, count, stored_leading);
    std::memcpy(body.data(), header.data(), header.size());
    std::byte* p = body.data() + wire::header_bytes;
    for (const auto& s : slots) {
        p[0] = static_cast<std::byte>(s.status);
        wire::put32(p + 4, s.code);
        p += wire::put_result_bytes;
    }
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", "application/x-fjord-kv");
    (void)co_await c.ex.send_all(
        200, headers, std::string_view(reinterpret_cast<const char*>(body.data()), body.size()));
}

}  // namespace fjord::s3

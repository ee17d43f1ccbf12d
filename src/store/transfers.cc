// The object-store operations that move bytes (object_store.h): put, get, copy, upload_part, copy_part,
// and those that end with reclaiming data (remove, complete_upload, abort_upload). The one place where a
// write becomes durable: write_data (or copy_data) makes a durable data file, commit_written commits its
// record and reclaims what the commit replaced, or the new data when the commit surely failed.

#include <algorithm>

#include "base/checksum.h"
#include "base/log.h"
#include "io/semaphore.h"
#include "store/engine.h"
#include "store/engine_internal.h"

namespace fjord::store {

namespace {

// Copied bytes go to the new file's writer, and to the front end's observer (its checksum of the copy).
class copy_sink final : public byte_sink {
public:
    copy_sink(object_writer& writer, const std::function<void(std::span<const std::byte>)>& observe)
        : _writer(writer), _observe(observe) {}
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        if (_observe) _observe(data);
        co_return co_await _writer.append(data);
    }

private:
    object_writer& _writer;
    const std::function<void(std::span<const std::byte>)>& _observe;
};

// Counts what reaches the front end's sink, so that a read that failed before any byte can be tried again.
class counting_sink final : public byte_sink {
public:
    explicit counting_sink(byte_sink& inner) : _inner(inner) {}
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        _bytes += data.size();
        co_return co_await _inner.write(data);
    }
    std::uint64_t bytes() const { return _bytes; }

private:
    byte_sink& _inner;
    std::uint64_t _bytes = 0;
};

base::failure no_bucket(const std::string& bucket) {
    return base::fail(base::errc::no_such_bucket, "bucket '" + bucket + "' does not exist");
}

}  // namespace

io::task<void> engine::free_space_after(const base::error& err) {
    if (err.code == base::errc::storage_full) co_await _spares->release_all();
}

io::task<base::result<segment>> engine::seal_checked(object_writer& writer,
                                                     base::result<void> so_far,
                                                     const seal_check& before_seal) {
    base::result<segment> sealed = base::fail(base::errc::internal);
    if (!so_far)
        sealed = so_far.as_failure();
    else if (auto checked = before_seal(written_data{writer.size_bytes(), writer.block_crcs()});
             !checked)
        sealed = checked.as_failure();
    else
        sealed = co_await writer.seal();
    if (!sealed) {
        co_await writer.discard();
        co_await free_space_after(sealed.err());
    }
    co_return sealed;
}

io::task<base::result<segment>> engine::write_data(byte_source& source,
                                                   std::optional<std::uint64_t> size_bytes,
                                                   std::uint64_t max_size_bytes,
                                                   const seal_check& before_seal) {
    if (size_bytes && *size_bytes > max_size_bytes)
        co_return base::fail(base::errc::entity_too_large,
                             "the declared size is larger than the maximum");
    object_writer writer(_drives, pool(), new_object_id(), _options.data_files, &writes(),
                         _spares.get());
    base::result<void> written = co_await writer.open(size_bytes);
    if (written) {
        auto bytes = co_await writer.write_from(source, size_bytes.value_or(max_size_bytes));
        if (!bytes)
            written = bytes.as_failure();
        else if (size_bytes && *bytes != *size_bytes)
            written = base::fail(base::errc::incomplete_body,
                                 "the body ended after " + std::to_string(*bytes) + " of " +
                                     std::to_string(*size_bytes) + " bytes");
    }
    co_return co_await seal_checked(writer, std::move(written), before_seal);
}

io::task<base::result<segment>> engine::copy_data(
    const object_record& source, byte_range range,
    const std::function<void(std::span<const std::byte>)>& observe, const seal_check& before_seal) {
    co_await copy_admission().acquire();
    io::semaphore::permit admitted(copy_admission());
    object_writer writer(_drives, pool(), new_object_id(), _options.data_files, &writes(),
                         _spares.get());
    copy_sink sink(writer, observe);
    base::result<void> copied = co_await writer.open(range.length);
    if (copied) {
        copied = co_await read_object(_drives, pool(), source, range.first, range.length, sink,
                                      _options.data_files);
        auto finished =
            co_await writer.finish_appends();  // waits for the writes in flight either way
        if (copied && !finished) copied = finished.as_failure();
    }
    co_return co_await seal_checked(writer, std::move(copied), before_seal);
}

io::task<base::result<object_record>> engine::commit_written(std::string bucket, std::string key,
                                                             object_record record,
                                                             write_conditions conditions,
                                                             const write_order* order) {
    // The version this write makes: the one named (a versioned bucket only), a new id while the bucket
    // has versioning enabled, else null
    record.version_id = version_for_write(bucket);
    if (order && !order->version_id.empty() && !record.version_id.empty())
        record.version_id = order->version_id;
    record.delete_marker = false;
    std::optional<std::string> etag_below;
    if (order) etag_below = order->etag_below;
    auto committed = co_await commit_put(bucket, key, record, conditions, std::move(etag_below));
    if (!committed) {
        if (commit_surely_failed(committed.err())) co_await reclaim(record);
        co_await free_space_after(committed.err());
        co_return committed.as_failure();
    }
    if (*committed) co_await reclaim(std::move(**committed));
    co_return record;
}

io::task<base::result<part_record>> engine::commit_written_part(std::string bucket, std::string key,
                                                                std::string upload_id,
                                                                part_record part) {
    auto committed = co_await commit_part(bucket, key, upload_id, part);
    if (!committed) {
        std::vector<segment> written{part.data};
        if (commit_surely_failed(committed.err())) co_await reclaim_segments(std::move(written));
        co_await free_space_after(committed.err());
        co_return committed.as_failure();
    }
    if (*committed) {
        std::vector<segment> replaced{(*committed)->data};  // an earlier upload of this part number
        co_await reclaim_segments(std::move(replaced));
    }
    co_return part;
}

// ---- objects ----

bool engine::take_inline_budget(std::uint64_t bytes) {
    if (_inline_bytes.fetch_add(bytes) + bytes <= _options.inline_budget_bytes) return true;
    _inline_bytes.fetch_sub(bytes);
    return false;
}

void engine::give_inline_budget(std::uint64_t bytes) { _inline_bytes.fetch_sub(bytes); }

// A small object: its bytes go into the record, which one journal write makes durable (no data file to
// create, write, sync and name). Space is admitted as for a data file, on the journals' drive.
io::task<base::result<object_record>> engine::put_inline(put_request request, byte_source& body,
                                                         record_finisher finish,
                                                         std::optional<write_order> order) {
    const std::uint64_t size = *request.size_bytes;
    // An empty object is a journal record only, like a delete: the floor kept free is for those.
    if (size > 0 && !_drives.space().admits(0, size))
        co_return base::fail(base::errc::storage_full, "no space left on drive");
    std::string data(size, '\0');
    auto* at = reinterpret_cast<std::byte*>(data.data());
    std::uint64_t got = 0;
    std::byte extra[1];
    for (;;) {
        bool full = got == size;
        auto n = co_await body.read(full ? extra : at + got, full ? sizeof extra : size - got);
        if (!n) {
            give_inline_budget(size);
            co_return n.as_failure();
        }
        if (*n == 0) break;
        if (full) {  // the source yields more than was declared: as a data file's writer answers
            give_inline_budget(size);
            co_return base::fail(base::errc::incomplete_body, "the body is longer than declared");
        }
        got += *n;
    }
    if (got != size) {
        give_inline_budget(size);
        co_return base::fail(base::errc::incomplete_body, "the body ended after " +
                                                              std::to_string(got) + " of " +
                                                              std::to_string(size) + " bytes");
    }
    const std::uint32_t crc = base::crc32c(std::span<const std::byte>(at, size));
    auto built = finish(written_data{size, std::span<const std::uint32_t>(&crc, 1)});
    if (!built) {
        give_inline_budget(size);
        co_return built.as_failure();
    }
    built->size_bytes = size;
    built->segments.clear();
    built->inline_data = std::move(data);
    co_return co_await commit_written(request.bucket, request.key, std::move(*built),
                                      request.conditions, order ? &*order : nullptr);
}

io::task<base::result<object_record>> engine::put(put_request request, byte_source& body,
                                                  record_finisher finish) {
    return put_with(std::move(request), std::nullopt, body,
                    std::move(finish));  // no frame of its own
}

io::task<base::result<object_record>> engine::put_ordered(put_request request, write_order order,
                                                          byte_source& body,
                                                          record_finisher finish) {
    return put_with(std::move(request), std::move(order), body, std::move(finish));
}

io::task<base::result<object_record>> engine::put_with(put_request request,
                                                       std::optional<write_order> order,
                                                       byte_source& body, record_finisher finish) {
    if (!bucket_exists(request.bucket)) co_return no_bucket(request.bucket);
    // An empty object needs no data file at all (nor the space a data file is admitted with).
    if (request.size_bytes &&
        (*request.size_bytes == 0 ||
         *request.size_bytes <=
             std::min<std::uint64_t>(_options.inline_max_bytes, request.max_size_bytes)) &&
        take_inline_budget(*request.size_bytes))
        co_return co_await put_inline(std::move(request), body, std::move(finish),
                                      std::move(order));
    object_record record;
    seal_check build = [&](const written_data& written) -> base::result<void> {
        auto built = finish(written);
        if (!built) return built.as_failure();
        record = std::move(*built);
        return {};
    };
    auto data = co_await write_data(body, request.size_bytes, request.max_size_bytes, build);
    if (!data) co_return data.as_failure();
    record.size_bytes = data->size_bytes;
    record.segments = {*data};
    co_return co_await commit_written(request.bucket, request.key, std::move(record),
                                      request.conditions, order ? &*order : nullptr);
}

namespace {
// Looks again this many times when a data file vanished because the key was replaced meanwhile.
constexpr int max_read_attempts = 8;

bool same_data(const object_record& a, const object_record& b) {
    if (a.segments.size() != b.segments.size()) return false;
    for (std::size_t i = 0; i < a.segments.size(); ++i)
        if (a.segments[i].id != b.segments[i].id) return false;
    return true;
}
}  // namespace

io::task<base::result<object_record>> engine::get(std::string bucket, std::string key,
                                                  read_planner plan, byte_sink& sink) {
    co_return co_await read(std::move(bucket), std::move(key), std::nullopt, std::move(plan), sink);
}

io::task<base::result<object_record>> engine::read(std::string bucket, std::string key,
                                                   std::optional<std::string> version_id,
                                                   read_planner plan, byte_sink& sink) {
    // A data file can vanish between the lookup and its open when the key is replaced meanwhile (every
    // file is opened before the first byte goes out): then the read starts again from the lookup. A
    // file gone while the record still names it is damage, and answered as such.
    for (int attempt = 1;; ++attempt) {
        auto found = co_await find(bucket, key, version_id);
        if (!found) co_return found.as_failure();
        auto range = plan(*found);
        if (!range) co_return range.as_failure();
        if (!*range || (*range)->length == 0) co_return found;
        if (!found->inline_data.empty()) {  // in the record: no file to open, nothing can vanish
            const auto* bytes = reinterpret_cast<const std::byte*>(found->inline_data.data());
            auto sent = co_await sink.write(
                std::span<const std::byte>(bytes + (*range)->first, (*range)->length));
            if (!sent) co_return sent.as_failure();
            co_return found;
        }
        counting_sink counted(sink);
        auto sent = co_await read_object(_drives, pool(), *found, (*range)->first, (*range)->length,
                                         counted, _options.data_files);
        if (sent) co_return found;
        if (sent.code() != base::errc::not_found || counted.bytes() > 0)
            co_return sent.as_failure();
        auto now = co_await find(bucket, key, version_id);
        if (now && same_data(*now, *found)) co_return sent.as_failure();
        if (attempt == max_read_attempts)
            co_return base::fail(base::errc::slow_down, "the key was replaced " +
                                                            std::to_string(attempt) +
                                                            " times while it was being read");
    }
}

io::task<base::result<std::optional<object_record>>> engine::remove(std::string bucket,
                                                                    std::string key,
                                                                    write_conditions conditions) {
    auto done = co_await commit_delete(bucket, key, conditions);
    if (!done) {
        co_await free_space_after(done.err());
        co_return done.as_failure();
    }
    if (done->removed) co_await reclaim(*done->removed);
    co_return done->marker ? std::move(done->marker) : std::move(done->removed);
}

// A copy of a small object kept in its record is one too (the budget is already taken for it).
io::task<base::result<object_record>> engine::copy_inline(copy_request request,
                                                          const object_record& source,
                                                          copy_plan planned) {
    object_record record = std::move(planned.record);
    std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(source.inline_data.data()),
                                     source.inline_data.size());
    if (!planned.may_share) {  // the front end sees the bytes and finishes the record from them
        if (planned.observe) planned.observe(bytes);
        if (planned.finish) {
            const std::uint32_t crc = base::crc32c(bytes);
            auto built = planned.finish(written_data{bytes.size(), std::span(&crc, 1)});
            if (!built) {
                give_inline_budget(bytes.size());
                co_return built.as_failure();
            }
            record = std::move(*built);
        }
    }
    record.size_bytes = source.size_bytes;
    record.segments.clear();
    record.inline_data = source.inline_data;
    co_return co_await commit_written(request.bucket, request.key, std::move(record),
                                      request.conditions);
}

io::task<base::result<object_record>> engine::copy(copy_request request, copy_planner plan) {
    // The source can be replaced while it is linked or read (its data file then vanishes): look again.
    for (int attempt = 0;; ++attempt) {
        auto found =
            co_await find(request.source_bucket, request.source_key, request.source_version_id);
        if (!found) co_return found.as_failure();
        auto planned = plan(*found);
        if (!planned) co_return planned.as_failure();
        if (!found->inline_data.empty() && take_inline_budget(found->size_bytes))
            co_return co_await copy_inline(std::move(request), *found, std::move(*planned));
        object_record record = std::move(planned->record);
        auto shared = base::result<std::vector<segment>>(base::fail(base::errc::not_implemented));
        if (planned->may_share && found->size_bytes > 0 && found->inline_data.empty())
            shared = co_await share_segments(found->segments);
        if (!shared && shared.code() == base::errc::not_found && attempt < 2) continue;
        if (shared) {
            record.size_bytes = found->size_bytes;
            record.segments = std::move(*shared);
        } else {
            // Not shareable, or the file system cannot link: copy the bytes.
            seal_check finish = [&](const written_data& written) -> base::result<void> {
                if (!planned->finish) return {};
                auto built = planned->finish(written);
                if (!built) return built.as_failure();
                record = std::move(*built);
                return {};
            };
            auto copied = co_await copy_data(*found, byte_range{0, found->size_bytes},
                                             planned->observe, finish);
            if (!copied && copied.code() == base::errc::not_found && attempt < 2) continue;
            if (!copied) co_return copied.as_failure();
            record.size_bytes = copied->size_bytes;
            record.segments = {*copied};
        }
        co_return co_await commit_written(request.bucket, request.key, std::move(record),
                                          request.conditions);
    }
}

// ---- multipart uploads ----

io::task<base::result<part_record>> engine::upload_part(part_request request, byte_source& body,
                                                        part_finisher finish) {
    part_record part;
    seal_check build = [&](const written_data& written) -> base::result<void> {
        auto built = finish(written);
        if (!built) return built.as_failure();
        part = std::move(*built);
        return {};
    };
    auto data = co_await write_data(body, request.size_bytes, request.max_size_bytes, build);
    if (!data) co_return data.as_failure();
    part.number = request.number;
    part.data = *data;
    co_return co_await commit_written_part(request.bucket, request.key, request.upload_id,
                                           std::move(part));
}

io::task<base::result<part_record>> engine::copy_part(part_copy_request request,
                                                      part_copy_planner plan) {
    for (int attempt = 0;; ++attempt) {
        auto found =
            co_await find(request.source_bucket, request.source_key, request.source_version_id);
        if (!found) co_return found.as_failure();
        auto planned = plan(*found);
        if (!planned) co_return planned.as_failure();
        part_record part;
        seal_check build = [&](const written_data& written) -> base::result<void> {
            auto built = planned->finish(written);
            if (!built) return built.as_failure();
            part = std::move(*built);
            return {};
        };
        auto copied = co_await copy_data(*found, planned->range, planned->observe, build);
        if (!copied && copied.code() == base::errc::not_found && attempt < 2) continue;
        if (!copied) co_return copied.as_failure();
        part.number = request.number;
        part.data = *copied;
        co_return co_await commit_written_part(request.bucket, request.key, request.upload_id,
                                               std::move(part));
    }
}

io::task<base::result<object_record>> engine::complete_upload(std::string bucket, std::string key,
                                                              std::string upload_id,
                                                              upload_finalizer finalize,
                                                              write_conditions conditions) {
    auto done = co_await commit_complete(std::move(bucket), std::move(key), std::move(upload_id),
                                         std::move(finalize), conditions);
    if (!done) {
        co_await free_space_after(done.err());
        co_return done.as_failure();
    }
    if (!done->unused_parts.empty()) co_await reclaim_segments(std::move(done->unused_parts));
    if (done->replaced) co_await reclaim(std::move(*done->replaced));
    co_return std::move(done->object);
}

io::task<base::result<void>> engine::abort_upload(std::string bucket, std::string key,
                                                  std::string upload_id) {
    auto removed = co_await commit_abort(std::move(bucket), std::move(key), std::move(upload_id));
    if (!removed) co_return removed.as_failure();
    std::vector<segment> data;
    for (const auto& [number, part] : removed->parts) data.push_back(part.data);
    co_await reclaim_segments(std::move(data));
    co_return base::result<void>{};
}

storage_stats engine::stats() const {
    spare_file_stats spares = _spares->stats();
    storage_stats out{spares.kept, spares.reused, spares.removed, 0,
                      _drives.space().reserved_ahead_bytes()};
    for (std::uint32_t d = 0; d < _drives.size(); ++d) out.spare_bytes += _spares->bytes_held(d);
    for (const auto& s : _shards) {
        out.key_lock_waits += s->locks.waits.load(std::memory_order_relaxed);
        out.key_lock_waiters_peak = std::max<std::uint64_t>(
            out.key_lock_waiters_peak, s->locks.peak_waiters.load(std::memory_order_relaxed));
    }
    return out;
}

}  // namespace fjord::store

#include "store/data_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/units.h"
#include "io/buffer_pool.h"
#include "io/reactor.h"
#include "io/task.h"
#include "store/drive.h"
#include "store_test_util.h"

namespace fjord::store {
namespace {

using base::KiB;
using base::MiB;
using testing::string_sink;
using testing::string_source;
using testing::temp_dir;

// One drive in a temp directory, one reactor, one buffer pool: runs a coroutine body against them.
struct data_file_env {
    temp_dir dir;
    drive_set drives;
    io::buffer_pool_options pool_options;
    data_file_options options;
    std::uint64_t next_id = 1;

    explicit data_file_env(io::buffer_pool_options pool_opts = {64 * KiB, 8},
                           data_file_options file_opts = {16 * KiB, 4})
        : pool_options(pool_opts), options(file_opts) {
        auto opened = drive_set::open({dir.path()});
        if (!opened) {
            ADD_FAILURE() << opened.err().message;
            std::abort();
        }
        drives = std::move(*opened);
    }

    object_id make_id() {
        return object_id{0x5eed, next_id++ * 0x1003};
    }  // spreads over fan-out dirs

    // Runs body(pool) on a single reactor until it returns.
    void run(const std::function<io::task<void>(io::buffer_pool*)>& body) {
        io::reactor_group group(1);
        std::unique_ptr<io::buffer_pool> pool;
        group.run([&](unsigned) {
            pool = std::make_unique<io::buffer_pool>(pool_options);
            pool->register_with(io::reactor::current().ring());
            io::spawn(testing::run_then_stop(body(pool.get()), &group));
        });
        EXPECT_EQ(pool->available(), pool->buffer_count())
            << "a buffer was not returned to the pool";
    }
};

struct write_outcome {
    base::errc code = base::errc::ok;
    std::uint64_t written_bytes = 0;
    object_record record;
};

// Writes `data` as a new object; on failure discards the file.
io::task<void> write_object(const drive_set* drives, io::buffer_pool* pool, object_id id,
                            data_file_options options, std::string data,
                            std::uint64_t max_size_bytes, std::uint64_t seed, bool announce_size,
                            write_outcome* out) {
    object_writer writer(*drives, *pool, id, options);
    const std::uint64_t size = data.size();
    auto opened =
        co_await writer.open(announce_size ? std::optional<std::uint64_t>(size) : std::nullopt);
    if (!opened) {
        out->code = opened.code();
        co_await writer.discard();
        co_return;
    }
    string_source source(std::move(data), seed);
    auto written = co_await writer.write_from(source, max_size_bytes);
    if (!written) {
        out->code = written.code();
        co_await writer.discard();
        co_return;
    }
    out->written_bytes = *written;
    auto sealed = co_await writer.seal();
    if (!sealed) {
        out->code = sealed.code();
        co_await writer.discard();
        co_return;
    }
    out->record.size_bytes = size;
    out->record.etag = "etag";
    out->record.segments.push_back(*sealed);
}

struct read_outcome {
    base::errc code = base::errc::ok;
    std::string bytes;
};

io::task<void> read_range(const drive_set* drives, io::buffer_pool* pool, object_record record,
                          std::uint64_t offset, std::uint64_t length, data_file_options options,
                          read_outcome* out) {
    string_sink sink;
    auto r = co_await read_object(*drives, *pool, std::move(record), offset, length, sink, options);
    out->code = r.code();
    out->bytes = std::move(sink.out);
}

class data_file_round_trip : public ::testing::TestWithParam<std::uint64_t> {};

void round_trip(data_file_env& env, std::uint64_t size, std::uint64_t seed) {
    std::string data = testing::pattern_bytes(size, seed);
    object_id id = env.make_id();
    write_outcome w;
    read_outcome r;
    env.run([&](io::buffer_pool* pool) -> io::task<void> {
        return [](data_file_env* e, io::buffer_pool* p, object_id oid, std::string bytes,
                  std::uint64_t s, write_outcome* wo, read_outcome* ro) -> io::task<void> {
            std::uint64_t n = bytes.size();
            co_await write_object(&e->drives, p, oid, e->options, std::move(bytes),
                                  max_data_file_bytes, s, true, wo);
            if (wo->code != base::errc::ok) co_return;
            co_await read_range(&e->drives, p, wo->record, 0, n, e->options, ro);
        }(&env, pool, id, data, seed, &w, &r);
    });
    ASSERT_EQ(w.code, base::errc::ok);
    EXPECT_EQ(w.written_bytes, size);
    ASSERT_EQ(w.record.segments.size(), 1u);
    EXPECT_EQ(w.record.segments[0].size_bytes, size);
    EXPECT_EQ(w.record.segments[0].block_bytes, env.options.block_bytes);
    EXPECT_EQ(w.record.segments[0].id, id);
    ASSERT_EQ(r.code, base::errc::ok);
    ASSERT_EQ(r.bytes.size(), size);
    EXPECT_TRUE(r.bytes == data) << "object bytes differ after a round trip";
    // On disk: the data padded to 4 KiB, then the footer.
    EXPECT_EQ(testing::file_size(testing::data_file_path(env.dir.path(), id)),
              base::align_up(size, base::direct_io_alignment_bytes) +
                  footer_bytes(size, env.options.block_bytes));
}

TEST_P(data_file_round_trip, small_buffers_and_blocks) {
    // 64 KiB buffers and 16 KiB blocks: large objects take many more chunks than the pipeline is deep.
    data_file_env env;
    round_trip(env, GetParam(), testing::test_seed(1000 + GetParam()));
}

TEST_P(data_file_round_trip, default_buffers_and_blocks) {
    data_file_env env(io::buffer_pool_options{1 * MiB, 8}, data_file_options{});
    round_trip(env, GetParam(), testing::test_seed(2000 + GetParam()));
}

INSTANTIATE_TEST_SUITE_P(sizes, data_file_round_trip,
                         ::testing::Values(0, 1, 4095, 4096, 65537, 1 * MiB, 3 * MiB + 5));

TEST(data_file, ranged_reads_cross_block_and_buffer_boundaries) {
    data_file_env env;  // 16 KiB blocks, 64 KiB buffers
    const std::uint64_t size = 1 * MiB + 12345;
    const std::uint64_t seed = testing::test_seed(77);
    std::string data = testing::pattern_bytes(size, seed);
    const std::uint64_t block = env.options.block_bytes, buffer = env.pool_options.buffer_bytes;
    struct range {
        std::uint64_t offset, length;
    };
    std::vector<range> ranges = {
        {0, 1},
        {1, 1},
        {block - 1, 2},                // straddles the first block boundary
        {block + 3, block},            // odd start, spans two blocks
        {buffer - 7, 14},              // straddles the first buffer boundary
        {buffer - 1, 2 * buffer + 3},  // spans several buffers
        {3 * buffer + block + 5, 5 * block + 11},
        {size - 1, 1},                  // the very last byte
        {size - block - 3, block + 3},  // the partial last block and the one before
        {12345, size - 12345 - 6789},   // almost everything, odd both ends
        {0, size},
        {size, 0},  // empty range at the end
        {4097, 0},  // empty range in the middle
    };
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 20; ++i) {
        std::uint64_t offset = rng() % size;
        ranges.push_back({offset, rng() % (size - offset + 1)});
    }
    write_outcome w;
    std::vector<read_outcome> reads(ranges.size());
    object_id id = env.make_id();
    env.run([&](io::buffer_pool* pool) -> io::task<void> {
        return [](data_file_env* e, io::buffer_pool* p, object_id oid, std::string bytes,
                  std::uint64_t s, const std::vector<range>* rs, write_outcome* wo,
                  std::vector<read_outcome>* ro) -> io::task<void> {
            co_await write_object(&e->drives, p, oid, e->options, std::move(bytes),
                                  max_data_file_bytes, s, false, wo);
            if (wo->code != base::errc::ok) co_return;
            for (std::size_t i = 0; i < rs->size(); ++i)
                co_await read_range(&e->drives, p, wo->record, (*rs)[i].offset, (*rs)[i].length,
                                    e->options, &(*ro)[i]);
        }(&env, pool, id, data, seed, &ranges, &w, &reads);
    });
    ASSERT_EQ(w.code, base::errc::ok);
    for (std::size_t i = 0; i < ranges.size(); ++i) {
        SCOPED_TRACE("range offset " + std::to_string(ranges[i].offset) + " length " +
                     std::to_string(ranges[i].length));
        EXPECT_EQ(reads[i].code, base::errc::ok);
        ASSERT_EQ(reads[i].bytes.size(), ranges[i].length);
        EXPECT_TRUE(reads[i].bytes == data.substr(ranges[i].offset, ranges[i].length));
    }
}

TEST(data_file, multi_segment_record_reads_across_segments) {
    data_file_env env;
    const std::uint64_t seed = testing::test_seed(31);
    std::string a = testing::pattern_bytes(100000, seed),
                b = testing::pattern_bytes(70001, seed + 1);
    write_outcome wa, wb;
    read_outcome whole, middle;
    object_id ia = env.make_id(), ib = env.make_id();
    env.run([&](io::buffer_pool* pool) -> io::task<void> {
        return [](data_file_env* e, io::buffer_pool* p, object_id id_a, object_id id_b,
                  std::string da, std::string db, write_outcome* oa, write_outcome* ob,
                  read_outcome* r1, read_outcome* r2) -> io::task<void> {
            co_await write_object(&e->drives, p, id_a, e->options, da, max_data_file_bytes, 1, true,
                                  oa);
            co_await write_object(&e->drives, p, id_b, e->options, db, max_data_file_bytes, 2, true,
                                  ob);
            if (oa->code != base::errc::ok || ob->code != base::errc::ok) co_return;
            object_record rec;
            rec.size_bytes = da.size() + db.size();
            rec.segments = {oa->record.segments[0], ob->record.segments[0]};
            co_await read_range(&e->drives, p, rec, 0, rec.size_bytes, e->options, r1);
            co_await read_range(&e->drives, p, rec, da.size() - 5, 10, e->options, r2);
        }(&env, pool, ia, ib, a, b, &wa, &wb, &whole, &middle);
    });
    ASSERT_EQ(wa.code, base::errc::ok);
    ASSERT_EQ(wb.code, base::errc::ok);
    EXPECT_EQ(whole.code, base::errc::ok);
    EXPECT_TRUE(whole.bytes == a + b);
    EXPECT_EQ(middle.code, base::errc::ok);
    EXPECT_EQ(middle.bytes, a.substr(a.size() - 5) + b.substr(0, 5));
}

// Writes an object, applies `damage` to its file on disk, then reads [offset, offset + length).
struct damage_result {
    write_outcome written;
    read_outcome read;
    std::string data;
};

damage_result write_damage_read(data_file_env& env, std::uint64_t size,
                                const std::function<void(const std::string&)>& damage,
                                std::uint64_t offset, std::uint64_t length) {
    damage_result out;
    const std::uint64_t seed = testing::test_seed(size);
    out.data = testing::pattern_bytes(size, seed);
    object_id id = env.make_id();
    env.run([&](io::buffer_pool* pool) -> io::task<void> {
        return write_object(&env.drives, pool, id, env.options, out.data, max_data_file_bytes, seed,
                            true, &out.written);
    });
    if (out.written.code != base::errc::ok) return out;
    damage(testing::data_file_path(env.dir.path(), id));
    env.run([&](io::buffer_pool* pool) -> io::task<void> {
        return read_range(&env.drives, pool, out.written.record, offset, length, env.options,
                          &out.read);
    });
    return out;
}

void flip_byte_at(const std::string& path, std::uint64_t offset) {
    int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << path;
    char c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
    c = static_cast<char>(c ^ 0x20);
    ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
}

TEST(data_file, flipped_data_byte_is_detected_and_its_block_never_reaches_the_sink) {
    data_file_env env;  // 16 KiB blocks, 64 KiB read chunks
    const std::uint64_t size = 1 * MiB;
    const std::uint64_t corrupt_at = 300001;
    auto result = write_damage_read(
        env, size, [&](const std::string& p) { flip_byte_at(p, corrupt_at); }, 0, size);
    ASSERT_EQ(result.written.code, base::errc::ok);
    EXPECT_EQ(result.read.code, base::errc::data_corrupted);
    const std::uint64_t corrupt_block_start = base::align_down(corrupt_at, env.options.block_bytes);
    EXPECT_LT(result.read.bytes.size(), size);
    EXPECT_LE(result.read.bytes.size(), corrupt_block_start);
    EXPECT_TRUE(result.read.bytes == result.data.substr(0, result.read.bytes.size()))
        << "bytes delivered before the error must be the original ones";
}

TEST(data_file, ranged_read_beside_a_corrupted_block_still_succeeds_and_over_it_fails) {
    data_file_env env;
    const std::uint64_t size = 512 * KiB;
    const std::uint64_t corrupt_at = 400000;
    read_outcome before, over;
    auto result = write_damage_read(
        env, size, [&](const std::string& p) { flip_byte_at(p, corrupt_at); }, 1000, 100000);
    ASSERT_EQ(result.written.code, base::errc::ok);
    EXPECT_EQ(result.read.code, base::errc::ok);
    EXPECT_TRUE(result.read.bytes == result.data.substr(1000, 100000));
    env.run([&](io::buffer_pool* pool) -> io::task<void> {
        return read_range(&env.drives, pool, result.written.record, corrupt_at - 3, 10, env.options,
                          &over);
    });
    EXPECT_EQ(over.code, base::errc::data_corrupted);
    EXPECT_TRUE(over.bytes.empty());
}

TEST(data_file, corrupted_footer_header_is_detected) {
    data_file_env env;
    const std::uint64_t size = 200000;
    auto result = write_damage_read(
        env, size, [&](const std::string& p) { flip_byte_at(p, base::align_up(size, 4096) + 20); },
        0, size);
    ASSERT_EQ(result.written.code, base::errc::ok);
    EXPECT_EQ(result.read.code, base::errc::data_corrupted);
    EXPECT_TRUE(result.read.bytes.empty());
}

TEST(data_file, corrupted_footer_checksum_table_is_detected) {
    data_file_env env;
    const std::uint64_t size = 200000;
    auto result = write_damage_read(
        env, size,
        [&](const std::string& p) { flip_byte_at(p, base::align_up(size, 4096) + 64 + 5); }, 0,
        size);
    ASSERT_EQ(result.written.code, base::errc::ok);
    EXPECT_EQ(result.read.code, base::errc::data_corrupted);
    EXPECT_TRUE(result.read.bytes.empty());
}

TEST(data_file, corrupted_footer_magic_is_detected) {
    data_file_env env;
    const std::uint64_t size = 5000;
    auto result = write_damage_read(
        env, size, [&](const std::string& p) { flip_byte_at(p, base::align_up(size, 4096)); }, 0,
        size);
    ASSERT_EQ(result.written.code, base::errc::ok);
    EXPECT_EQ(result.read.code, base::errc::data_corrupted);
}

TEST(data_file, truncated_file_is_detected) {
    const std::uint64_t size = 300000;
    for (std::uint64_t keep : {std::uint64_t{0}, std::uint64_t{4096}, size / 2,
                               base::align_up(size, 4096), base::align_up(size, 4096) + 100}) {
        SCOPED_TRACE("truncated to " + std::to_string(keep));
        data_file_env env;
        auto result = write_damage_read(
            env, size,
            [&](const std::string& p) {
                ASSERT_EQ(::truncate(p.c_str(), static_cast<off_t>(keep)), 0);
            },
            0, size);
        ASSERT_EQ(result.written.code, base::errc::ok);
        EXPECT_EQ(result.read.code, base::errc::data_corrupted);
        EXPECT_TRUE(result.read.bytes.empty());
    }
}

TEST(data_file, deleted_file_is_not_found) {
    data_file_env env;
    auto result = write_damage_read(
        env, 10000, [&](const std::string& p) { ASSERT_EQ(::unlink(p.c_str()), 0); }, 0, 10000);
    ASSERT_EQ(result.written.code, base::errc::ok);
    EXPECT_EQ(result.read.code, base::errc::not_found);
    EXPECT_TRUE(result.read.bytes.empty());
}

TEST(data_file, record_that_does_not_match_the_footer_is_corrupted) {
    data_file_env env;
    const std::uint64_t size = 100000;
    auto result = write_damage_read(env, size, [](const std::string&) {}, 0, 10);
    ASSERT_EQ(result.written.code, base::errc::ok);
    ASSERT_EQ(result.read.code, base::errc::ok);
    object_record wrong = result.written.record;
    wrong.segments[0].table_crc ^= 1;
    read_outcome r;
    env.run([&](io::buffer_pool* pool) -> io::task<void> {
        return read_range(&env.drives, pool, wrong, 0, 10, env.options, &r);
    });
    EXPECT_EQ(r.code, base::errc::data_corrupted);
}

TEST(data_file, source_larger_than_the_maximum_is_entity_too_large_and_leaves_no_file) {
    for (std::uint64_t max :
         {std::uint64_t{0}, std::uint64_t{50000}, std::uint64_t{64 * KiB}, std::uint64_t{199999}}) {
        SCOPED_TRACE("max " + std::to_string(max));
        data_file_env env;
        const std::uint64_t seed = testing::test_seed(max);
        std::string data = testing::pattern_bytes(200000, seed);
        object_id id = env.make_id();
        write_outcome w;
        env.run([&](io::buffer_pool* pool) -> io::task<void> {
            return write_object(&env.drives, pool, id, env.options, data, max, seed, false, &w);
        });
        EXPECT_EQ(w.code, base::errc::entity_too_large);
        EXPECT_FALSE(testing::file_exists(testing::data_file_path(env.dir.path(), id)));
    }
}

TEST(data_file, source_exactly_at_the_maximum_is_accepted) {
    data_file_env env;
    const std::uint64_t seed = testing::test_seed(9);
    std::string data = testing::pattern_bytes(128 * KiB, seed);  // a multiple of the buffer size
    object_id id = env.make_id();
    write_outcome w;
    env.run([&](io::buffer_pool* pool) -> io::task<void> {
        return write_object(&env.drives, pool, id, env.options, data, data.size(), seed, false, &w);
    });
    EXPECT_EQ(w.code, base::errc::ok);
    EXPECT_EQ(w.written_bytes, data.size());
}

io::task<void> open_write_discard(const drive_set* drives, io::buffer_pool* pool, object_id id,
                                  data_file_options options, std::string path, bool* existed_before,
                                  base::errc* code) {
    object_writer writer(*drives, *pool, id, options);
    auto opened = co_await writer.open(std::nullopt);
    *code = opened.code();
    if (!opened) co_return;
    string_source source(std::string(100000, 'z'), 5);
    auto written = co_await writer.write_from(source, max_data_file_bytes);
    *code = written.code();
    *existed_before = testing::file_exists(path);
    co_await writer.discard();
}

TEST(data_file, discard_removes_the_file) {
    data_file_env env;
    object_id id = env.make_id();
    std::string path = testing::data_file_path(env.dir.path(), id);
    bool existed = false;
    base::errc code = base::errc::internal;
    env.run([&](io::buffer_pool* pool) -> io::task<void> {
        return open_write_discard(&env.drives, pool, id, env.options, path, &existed, &code);
    });
    EXPECT_EQ(code, base::errc::ok);
    EXPECT_TRUE(existed);
    EXPECT_FALSE(testing::file_exists(path));
}

TEST(data_file, footer_bytes_covers_header_and_table) {
    EXPECT_EQ(footer_bytes(0, 64 * KiB), 4096u);
    EXPECT_EQ(footer_bytes(1, 64 * KiB), 4096u);
    // 64-byte header + 4 bytes per block: 1008 blocks fill exactly 4 KiB, one more needs 8 KiB.
    EXPECT_EQ(footer_bytes(1008ULL * 4096, 4096), 4096u);
    EXPECT_EQ(footer_bytes(1008ULL * 4096 + 1, 4096), 8192u);
}

// ---- space: reserved in steps as bytes arrive, on a bounded budget, under a floor ----

// A source that stops (reports a failure) after `limit` bytes: an upload cut off midway.
class cut_source final : public byte_source {
public:
    cut_source(std::string data, std::size_t limit, const drive_space* space,
               std::vector<std::uint64_t>* seen)
        : _data(std::move(data)), _limit(limit), _space(space), _seen(seen) {}
    io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) override {
        _seen->push_back(_space->reserved_ahead_bytes());
        if (_pos == _data.size()) co_return std::size_t{0};
        if (_pos >= _limit) co_return base::fail(base::errc::incomplete_body, "cut off");
        std::size_t n = std::min({max, _data.size() - _pos, _limit - _pos, std::size_t{48 * 1024}});
        std::memcpy(dst, _data.data() + _pos, n);
        _pos += n;
        co_return n;
    }

private:
    std::string _data;
    std::size_t _pos = 0;
    std::size_t _limit;
    const drive_space* _space;
    std::vector<std::uint64_t>* _seen;
};

struct space_outcome {
    std::vector<std::uint64_t> reserved_while_writing;
    std::uint64_t reserved_after = 99;
    base::errc code = base::errc::ok;
};

io::task<void> write_with_budget(const drive_set* drives, io::buffer_pool* pool, object_id id,
                                 data_file_options options, std::size_t size, std::size_t cut_at,
                                 space_outcome* out) {
    object_writer writer(*drives, *pool, id, options);
    auto opened = co_await writer.open(size);
    if (!opened) {
        out->code = opened.code();
        co_await writer.discard();
        out->reserved_after = drives->space().reserved_ahead_bytes();
        co_return;
    }
    cut_source source(testing::pattern_bytes(size, 11), cut_at, &drives->space(),
                      &out->reserved_while_writing);
    auto written = co_await writer.write_from(source, max_data_file_bytes);
    if (written) {
        auto sealed = co_await writer.seal();
        if (!sealed) out->code = sealed.code();
    } else {
        out->code = written.code();
    }
    if (out->code != base::errc::ok) co_await writer.discard();
    out->reserved_after = drives->space().reserved_ahead_bytes();
}

std::vector<int> root_fds(const drive_set& drives) {
    std::vector<int> fds;
    for (std::uint32_t d = 0; d < drives.size(); ++d) fds.push_back(drives.at(d).root_fd);
    return fds;
}

TEST(drive_space, a_write_reserves_at_most_a_step_ahead_and_gives_all_of_it_back) {
    data_file_env env;
    space_options options;
    options.min_free_bytes = 0;
    options.reserve_step_bytes = 256 * KiB;
    options.max_reserved_ahead_bytes = 1 * MiB;
    ASSERT_TRUE(env.drives.space().configure(env.drives.fs(), root_fds(env.drives), options));
    for (bool cut : {false, true}) {
        space_outcome out;
        const std::size_t size = 2 * MiB + 3;
        env.run([&](io::buffer_pool* pool) {
            return write_with_budget(&env.drives, pool, env.make_id(), env.options, size,
                                     cut ? 700 * KiB : size, &out);
        });
        SCOPED_TRACE(cut ? "cut off" : "whole");
        EXPECT_EQ(out.code, cut ? base::errc::incomplete_body : base::errc::ok);
        ASSERT_FALSE(out.reserved_while_writing.empty());
        for (std::uint64_t r : out.reserved_while_writing)
            EXPECT_LE(r, 256 * KiB) << "more than one step ahead";
        EXPECT_GT(
            *std::max_element(out.reserved_while_writing.begin(), out.reserved_while_writing.end()),
            0u);
        EXPECT_EQ(out.reserved_after, 0u) << "reserve-ahead budget leaked";
    }
}

TEST(drive_space, the_budget_bounds_every_writer_together_and_the_floor_refuses_with_storage_full) {
    data_file_env env;
    space_options options;
    options.min_free_bytes = 0;
    options.reserve_step_bytes = 256 * KiB;
    options.max_reserved_ahead_bytes = 256 * KiB;  // one writer's step
    ASSERT_TRUE(env.drives.space().configure(env.drives.fs(), root_fds(env.drives), options));
    ASSERT_TRUE(env.drives.space().try_claim(256 * KiB));  // another writer holds the whole budget
    space_outcome out;
    env.run([&](io::buffer_pool* pool) {
        return write_with_budget(&env.drives, pool, env.make_id(), env.options, 1 * MiB, 1 * MiB,
                                 &out);
    });
    EXPECT_EQ(out.code, base::errc::ok)
        << "a writer without budget still writes, taking space as it lands";
    for (std::uint64_t r : out.reserved_while_writing) EXPECT_EQ(r, 256 * KiB);
    env.drives.space().release(256 * KiB);
    EXPECT_EQ(env.drives.space().reserved_ahead_bytes(), 0u);

    // A floor above the drive's free space: every new write is refused before it starts.
    options.min_free_bytes = 1ULL << 62;
    ASSERT_TRUE(env.drives.space().configure(env.drives.fs(), root_fds(env.drives), options));
    space_outcome refused;
    env.run([&](io::buffer_pool* pool) {
        return write_with_budget(&env.drives, pool, env.make_id(), env.options, 100 * KiB,
                                 100 * KiB, &refused);
    });
    EXPECT_EQ(refused.code, base::errc::storage_full);
    EXPECT_EQ(refused.reserved_after, 0u);
}

}  // namespace
}  // namespace fjord::store

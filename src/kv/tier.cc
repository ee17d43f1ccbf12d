#include "kv/tier.h"

#include <algorithm>
#include <filesystem>

#include "base/assert.h"
#include "base/checksum.h"
#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "io/cross_core.h"
#include "io/reactor.h"
#include "io/wait_group.h"

namespace fjord::kv {

namespace {

constexpr std::uint64_t MiB = 1024 * 1024;
constexpr std::size_t crc_block_bytes = 1024 * 1024;  // written_data.block_crcs for the ETag

auto no_bucket(const std::string& name) {
    return base::fail(base::errc::no_such_bucket, "no KV bucket " + name);
}

std::string config_text(const tier::bucket_config& c) {
    return "name=" + c.name + "\ncapacity_bytes=" + std::to_string(c.options.capacity_bytes) +
           "\nttl_seconds=" + std::to_string(c.options.ttl_seconds) +
           "\nack=" + (c.options.ack == store::kv_write_ack::dram ? "dram" : "nvme") +
           "\nshards=" + std::to_string(c.shards) +
           "\nsegment_bytes=" + std::to_string(c.segment_bytes) +
           "\ncreated_ms=" + std::to_string(c.created_ms) + "\n";
}

base::result<tier::bucket_config> parse_config(const std::string& text) {
    tier::bucket_config c;
    std::size_t start = 0;
    int fields = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(start, end - start);
        start = end + 1;
        auto eq = line.find('=');
        if (eq == std::string::npos) continue;
        std::string name = line.substr(0, eq), value = line.substr(eq + 1);
        auto number = base::parse_u64(value);
        if (name == "name")
            c.name = value, ++fields;
        else if (name == "ack")
            c.options.ack = value == "dram" ? store::kv_write_ack::dram : store::kv_write_ack::nvme,
            ++fields;
        else if (!number)
            continue;
        else if (name == "capacity_bytes")
            c.options.capacity_bytes = *number, ++fields;
        else if (name == "ttl_seconds")
            c.options.ttl_seconds = static_cast<std::int64_t>(*number), ++fields;
        else if (name == "shards")
            c.shards = static_cast<unsigned>(*number), ++fields;
        else if (name == "segment_bytes")
            c.segment_bytes = *number, ++fields;
        else if (name == "created_ms")
            c.created_ms = static_cast<std::int64_t>(*number), ++fields;
    }
    if (fields != 7 || c.shards == 0 || c.segment_bytes == 0)
        return base::fail(base::errc::invalid_argument, "damaged KV bucket configuration");
    return c;
}

std::string shard_directory(const std::string& root, const std::string& bucket, unsigned shard) {
    return root + "/" + bucket + "/shard-" + std::to_string(shard);
}

// Reads a PUT body of a declared size into a new block buffer.
io::task<base::result<std::shared_ptr<store::block_buffer>>> read_body(store::byte_source& body,
                                                                       std::uint64_t size_bytes) {
    auto bytes = store::block_buffer::allocate(size_bytes);
    auto value = bytes->value();
    std::size_t got = 0;
    while (got < value.size()) {
        auto n = co_await body.read(value.data() + got, value.size() - got);
        if (!n) co_return n.as_failure();
        if (*n == 0) co_return base::fail(base::errc::incomplete_body, "the body ended early");
        got += *n;
    }
    std::byte extra[1];
    auto n = co_await body.read(extra, sizeof extra);
    if (!n) co_return n.as_failure();
    if (*n != 0) co_return base::fail(base::errc::bad_request, "the body is longer than declared");
    co_return bytes;
}

}  // namespace

std::uint64_t key_hash(std::string_view key) {
    std::uint64_t h = 1469598103934665603ULL;
    for (char c : key) {
        h ^= static_cast<unsigned char>(c);
        h *= 1099511628211ULL;
    }
    return h;
}

// The operations that run on a key's owner core: plain functions of their parameters (io/cross_core.h).
struct tier_ops {
    static io::task<base::result<std::pair<store::block_ref, store::object_record>>> read(
        tier* t, std::string bucket, std::string key) {
        auto shard = t->local_shard(bucket, key);
        if (!shard) co_return shard.as_failure();
        std::shared_ptr<shard_log> keep = *shard;
        co_return co_await keep->read(std::move(key));
    }
    static io::task<base::result<store::object_record>> head(tier* t, std::string bucket,
                                                             std::string key) {
        auto shard = t->local_shard(bucket, key);
        if (!shard) co_return shard.as_failure();
        const cache_entry* e = (*shard)->find(key);
        if (e == nullptr) co_return base::fail(base::errc::no_such_key, "no such KV block");
        store::object_record r = e->meta;
        r.size_bytes = e->value_bytes;
        co_return r;
    }
    static io::task<base::result<bool>> write(tier* t, std::string bucket, std::string key,
                                              std::shared_ptr<store::block_buffer> bytes,
                                              store::object_record record,
                                              store::write_conditions conditions) {
        auto shard = t->local_shard(bucket, key);
        if (!shard) co_return shard.as_failure();
        std::shared_ptr<shard_log> keep = *shard;
        co_return co_await keep->write(std::move(key), std::move(bytes), std::move(record),
                                       std::move(conditions));
    }
    static io::task<base::result<std::optional<store::object_record>>> remove(
        tier* t, std::string bucket, std::string key, store::write_conditions conditions) {
        auto shard = t->local_shard(bucket, key);
        if (!shard) co_return shard.as_failure();
        std::shared_ptr<shard_log> keep = *shard;
        co_return co_await keep->remove(std::move(key), std::move(conditions));
    }
    using sized = std::vector<std::pair<std::size_t, std::optional<std::uint64_t>>>;
    static io::task<base::result<sized>> sizes(
        tier* t, std::string bucket, std::vector<std::pair<std::size_t, std::string>> keys) {
        sized out;
        out.reserve(keys.size());
        for (auto& [i, key] : keys) {
            auto shard = t->local_shard(bucket, key);
            if (!shard) co_return shard.as_failure();
            const cache_entry* e = (*shard)->find(key);
            out.emplace_back(i, e ? std::optional<std::uint64_t>(e->value_bytes) : std::nullopt);
        }
        co_return out;
    }
    using fetched = std::vector<std::pair<std::size_t, store::block_ref>>;
    static io::task<void> read_one(std::shared_ptr<shard_log> shard, std::string key,
                                   store::block_ref* out) {
        auto r = co_await shard->read(std::move(key));
        if (r) *out = std::move(r->first);
    }
    // This core's keys of a batch: DRAM hits at once, NVMe reads up to 16 at a time.
    static io::task<base::result<fetched>> read_many(
        tier* t, std::string bucket, std::vector<std::pair<std::size_t, std::string>> keys) {
        fetched out(keys.size());
        io::wait_group reads(16);
        for (std::size_t i = 0; i < keys.size(); ++i) {
            auto shard = t->local_shard(bucket, keys[i].second);
            if (!shard) {
                co_await reads.wait();
                co_return shard.as_failure();
            }
            out[i].first = keys[i].first;
            co_await reads.spawn(read_one(*shard, std::move(keys[i].second), &out[i].second));
        }
        co_await reads.wait();
        co_return out;
    }
    using scanned = std::vector<std::pair<std::string, store::object_record>>;
    static io::task<base::result<scanned>> scan(tier* t, std::string bucket, std::string prefix,
                                                std::string start_after, std::size_t limit) {
        auto& buckets = t->here().buckets;
        auto it = buckets.find(bucket);
        if (it == buckets.end()) co_return no_bucket(bucket);
        scanned out;
        for (auto& shard : it->second.shards) {
            if (!shard) continue;
            auto part = shard->scan(prefix, start_after, limit);
            out.insert(out.end(), std::make_move_iterator(part.begin()),
                       std::make_move_iterator(part.end()));
        }
        co_return out;
    }
    static io::task<base::result<std::uint64_t>> count(tier* t, std::string bucket) {
        auto& buckets = t->here().buckets;
        auto it = buckets.find(bucket);
        if (it == buckets.end()) co_return no_bucket(bucket);
        std::uint64_t n = 0;
        for (auto& shard : it->second.shards)
            if (shard) n += shard->stats().blocks;
        co_return n;
    }
    static io::task<base::result<void>> attach(tier* t, unsigned core,
                                               std::shared_ptr<const tier::bucket_config> config) {
        co_return t->attach_bucket(core, std::move(config));
    }
    static io::task<base::result<void>> detach(tier* t, std::string bucket) {
        t->here().buckets.erase(bucket);
        co_return base::result<void>{};
    }
    static io::task<base::result<void>> create(tier* t, std::string name,
                                               store::kv_bucket_options options);
    static io::task<base::result<void>> destroy(tier* t, std::string name);
};

tier::tier(tier_options options) : _options(std::move(options)) {
    if (_options.fs == nullptr) _options.fs = &store::posix_file_system();
    for (unsigned c = 0; c < _options.cores; ++c) {
        auto state = std::make_unique<core_state>();
        state->dram = std::make_unique<dram_cache>(_options.dram_bytes / _options.cores);
        if (_options.read_queue_bytes > 0)
            state->reads = std::make_unique<io::semaphore>(_options.read_queue_bytes);
        _cores.push_back(std::move(state));
    }
}

tier::~tier() {
    for (auto& c : _cores) c->buckets.clear();  // the shards leave the DRAM lists first
}

tier::core_state& tier::here() const {
    unsigned core = io::reactor::on_reactor_thread() ? io::reactor::current().core() : 0;
    return *_cores[core];
}

base::result<void> tier::attach_bucket(unsigned core, std::shared_ptr<const bucket_config> config) {
    bucket_view view;
    view.config = config;
    view.shards.resize(config->shards);
    const std::uint64_t capacity = config->options.capacity_bytes / config->shards;
    for (unsigned s = 0; s < config->shards; ++s) {
        if (s % _options.cores != core) continue;
        shard_options o;
        o.directory = shard_directory(_options.directory, config->name, s);
        o.capacity_bytes = capacity;
        o.segment_bytes = config->segment_bytes;
        o.ack = config->options.ack;
        o.ttl_ms = config->options.ttl_seconds * 1000;
        o.fs = _options.fs;
        o.read_budget = _cores[core]->reads.get();
        auto opened = shard_log::open_blocking(o, _cores[core]->dram.get());
        if (!opened) return opened.as_failure();
        view.shards[s] = std::move(*opened);
    }
    _cores[core]->buckets[config->name] = std::move(view);
    return base::result<void>{};
}

base::result<std::unique_ptr<tier>> tier::open_blocking(tier_options options) {
    FJORD_ASSERT(options.cores >= 1);
    std::unique_ptr<tier> t(new tier(std::move(options)));
    std::error_code ec;
    // Only the server's user reads the cache's blocks (docs/security.md): a directory it makes is
    // 0700; one an operator made keeps its mode
    if (std::filesystem::create_directories(t->_options.directory, ec) && !ec)
        std::filesystem::permissions(t->_options.directory, std::filesystem::perms::owner_all, ec);
    if (ec)
        return base::fail(base::errc::io_error,
                          "cannot create " + t->_options.directory + ": " + ec.message());
    for (const auto& dir : std::filesystem::directory_iterator(t->_options.directory, ec)) {
        auto text = t->_options.fs->read_file_blocking(dir.path().string() + "/bucket.conf");
        if (!text) continue;  // a bucket being made or removed when the server stopped
        auto config = parse_config(*text);
        if (!config)
            return base::fail(base::errc::io_error,
                              dir.path().string() + ": " + config.err().message);
        auto shared = std::make_shared<const bucket_config>(std::move(*config));
        for (unsigned c = 0; c < t->_options.cores; ++c) FJORD_TRY(t->attach_bucket(c, shared));
    }
    if (ec) return base::fail(base::errc::io_error, "cannot list " + t->_options.directory);
    return t;
}

base::result<unsigned> tier::owner_of(const std::string& bucket, const std::string& key) const {
    auto& buckets = here().buckets;
    auto it = buckets.find(bucket);
    if (it == buckets.end()) return no_bucket(bucket);
    return static_cast<unsigned>(key_hash(key) % it->second.config->shards % _options.cores);
}

base::result<std::shared_ptr<shard_log>> tier::local_shard(const std::string& bucket,
                                                           const std::string& key) const {
    auto& buckets = here().buckets;
    auto it = buckets.find(bucket);
    if (it == buckets.end()) return no_bucket(bucket);
    auto& shard = it->second.shards[key_hash(key) % it->second.config->shards];
    FJORD_ASSERT(shard != nullptr, "a KV operation ran on a core that does not own the key");
    return shard;
}

bool tier::bucket_exists(const std::string& name) const { return here().buckets.contains(name); }

std::vector<store::bucket_info> tier::list_buckets() const {
    std::vector<store::bucket_info> out;
    for (const auto& [name, view] : here().buckets) out.push_back({name, view.config->created_ms});
    return out;
}

std::uint64_t tier::max_block_bytes(const std::string& bucket) const {
    auto& buckets = here().buckets;
    auto it = buckets.find(bucket);
    return it == buckets.end() ? 0 : it->second.config->segment_bytes / 2;  // shard_log's limit
}

store::block_store* tier::blocks_of(const std::string& bucket) {
    return bucket_exists(bucket) ? this : nullptr;
}

io::task<base::result<void>> tier::create_bucket(std::string name) {
    // Every bucket of the tier is a KV bucket: a plain one gets the tier's defaults.
    co_return co_await create_kv_bucket(std::move(name), store::kv_bucket_options{});
}

io::task<base::result<void>> tier_ops::create(tier* t, std::string name,
                                              store::kv_bucket_options options) {
    if (t->bucket_exists(name))
        co_return base::fail(base::errc::bucket_already_owned_by_you, "KV bucket exists: " + name);
    auto config = std::make_shared<tier::bucket_config>();
    config->name = name;
    config->options = options;
    if (config->options.capacity_bytes == 0)
        config->options.capacity_bytes = t->_options.default_capacity_bytes;
    config->shards = t->_options.cores;
    const std::uint64_t per_shard = config->options.capacity_bytes / config->shards;
    // Eight segments a shard, each 1 MiB to max_segment_bytes.
    config->segment_bytes =
        std::clamp<std::uint64_t>(per_shard / 8 / MiB * MiB, MiB, t->_options.max_segment_bytes);
    if (per_shard < 3 * config->segment_bytes + config->segment_bytes)
        co_return base::fail(base::errc::invalid_argument,
                             "a KV bucket needs a capacity of at least " +
                                 std::to_string(4 * config->shards) + " MiB");
    config->created_ms = base::unix_now_ms();
    // Made and removed on core 0 only, so two creations of one name cannot both succeed. Blocking file
    // operations here (a directory and a small file) are rare administration, not the data path.
    std::string dir = t->_options.directory + "/" + name;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);  // left by a creation that failed
    std::filesystem::create_directories(dir, ec);
    if (!ec) std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
    if (ec)
        co_return base::fail(base::errc::io_error, "cannot create " + dir + ": " + ec.message());
    auto written =
        t->_options.fs->replace_file_blocking(dir + "/bucket.conf", config_text(*config));
    if (!written) co_return written.as_failure();
    std::shared_ptr<const tier::bucket_config> shared = config;
    for (unsigned c = 0; c < t->_options.cores; ++c) {
        auto attach = [t, c, shared] { return tier_ops::attach(t, c, shared); };
        FJORD_CO_TRY(co_await io::invoke_on(c, attach));
    }
    LOG_INFO("made KV bucket %s: %llu MiB of NVMe in %u shards, %s-acknowledged writes",
             name.c_str(), static_cast<unsigned long long>(config->options.capacity_bytes / MiB),
             config->shards, options.ack == store::kv_write_ack::dram ? "DRAM" : "NVMe");
    co_return base::result<void>{};
}

io::task<base::result<void>> tier::create_kv_bucket(std::string name,
                                                    store::kv_bucket_options options) {
    auto create = [this, name, options] { return tier_ops::create(this, name, options); };
    co_return co_await io::invoke_on(0, create);
}

io::task<base::result<void>> tier_ops::destroy(tier* t, std::string name) {
    if (!t->bucket_exists(name)) co_return no_bucket(name);
    for (unsigned c = 0; c < t->_options.cores; ++c) {
        auto count = [t, name] { return tier_ops::count(t, name); };
        auto n = co_await io::invoke_on(c, count);
        if (!n) co_return n.as_failure();
        if (*n > 0)
            co_return base::fail(base::errc::bucket_not_empty,
                                 "The bucket you tried to delete is not empty");
    }
    std::string dir = t->_options.directory + "/" + name;
    if (int rc = t->_options.fs->unlink_blocking(dir + "/bucket.conf"); rc < 0 && rc != -ENOENT)
        co_return base::fail(base::errc::io_error, "cannot remove " + dir + "/bucket.conf");
    for (unsigned c = 0; c < t->_options.cores; ++c) {
        auto detach = [t, name] { return tier_ops::detach(t, name); };
        FJORD_CO_TRY(co_await io::invoke_on(c, detach));
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    co_return base::result<void>{};
}

io::task<base::result<void>> tier::delete_bucket(std::string name) {
    auto destroy = [this, name] { return tier_ops::destroy(this, name); };
    co_return co_await io::invoke_on(0, destroy);
}

namespace {
// A KV record as S3 reads it: one segment, so that partNumber=1 names the whole block.
store::object_record as_s3_record(store::object_record r) {
    r.segments.assign(1, store::segment{});
    r.segments[0].size_bytes = r.size_bytes;
    return r;
}
}  // namespace

io::task<base::result<store::object_record>> tier::put(store::put_request request,
                                                       store::byte_source& body,
                                                       store::record_finisher finish) {
    auto owner = owner_of(request.bucket, request.key);
    if (!owner) co_return owner.as_failure();
    if (!request.size_bytes)
        co_return base::fail(base::errc::missing_content_length,
                             "a block written to a KV bucket needs a Content-Length");
    const std::uint64_t limit =
        std::min<std::uint64_t>(request.max_size_bytes, _options.max_segment_bytes / 2);
    if (*request.size_bytes > limit)
        co_return base::fail(base::errc::entity_too_large,
                             "a KV block may be at most " + std::to_string(limit) + " bytes");
    auto bytes = co_await read_body(body, *request.size_bytes);
    if (!bytes) co_return bytes.as_failure();
    auto value = (*bytes)->value();
    std::vector<std::uint32_t> crcs;
    std::uint32_t whole = 0;
    for (std::size_t at = 0; at < value.size(); at += crc_block_bytes) {
        auto block = value.subspan(at, std::min(crc_block_bytes, value.size() - at));
        crcs.push_back(base::crc32c(block));
        whole = base::crc32c_combine(whole, crcs.back(), block.size());
    }
    (*bytes)->value_crc = value.empty() ? base::crc32c({}) : whole;
    auto record = finish(store::written_data{value.size(), crcs});
    if (!record) co_return record.as_failure();
    record->size_bytes = value.size();
    const bool conditional = request.conditions.if_none_match_any;
    auto written = co_await write_block(request.bucket, request.key, std::move(*bytes), *record,
                                        request.conditions);
    if (!written) co_return written.as_failure();
    if (!*written && conditional)
        co_return base::fail(base::errc::precondition_failed,
                             "At least one of the pre-conditions you specified did not hold");
    co_return as_s3_record(std::move(*record));
}

io::task<base::result<store::object_record>> tier::head(std::string bucket, std::string key) {
    auto owner = owner_of(bucket, key);
    if (!owner) co_return owner.as_failure();
    auto op = [this, bucket, key] { return tier_ops::head(this, bucket, key); };
    auto r = co_await io::invoke_on(*owner, op);
    if (!r) co_return r;
    co_return as_s3_record(std::move(*r));
}

io::task<base::result<store::object_record>> tier::get(std::string bucket, std::string key,
                                                       store::read_planner plan,
                                                       store::byte_sink& sink) {
    auto block = co_await read_block(bucket, key);
    if (!block) co_return block.as_failure();
    store::object_record record = as_s3_record(std::move(block->second));
    auto range = plan(record);
    if (!range) co_return range.as_failure();
    if (*range) {
        auto value = block->first->value();
        if ((*range)->first + (*range)->length > value.size())
            co_return base::fail(base::errc::invalid_range, "the range is past the block's end");
        FJORD_CO_TRY(co_await sink.write(value.subspan((*range)->first, (*range)->length)));
    }
    co_return record;
}

io::task<base::result<std::optional<store::object_record>>> tier::remove(
    std::string bucket, std::string key, store::write_conditions conditions) {
    auto owner = owner_of(bucket, key);
    if (!owner) co_return owner.as_failure();
    auto op = [this, bucket, key, conditions] {
        return tier_ops::remove(this, bucket, key, conditions);
    };
    co_return co_await io::invoke_on(*owner, op);
}

io::task<base::result<store::list_page>> tier::list(store::list_request request) {
    if (!bucket_exists(request.bucket)) co_return no_bucket(request.bucket);
    // A common prefix as the marker skips every key under it.
    std::string skip_under;
    if (!request.delimiter.empty() && request.start_after.size() > request.prefix.size() &&
        request.start_after.ends_with(request.delimiter))
        skip_under = request.start_after;
    const std::size_t limit = static_cast<std::size_t>(request.max_keys) + 1;
    tier_ops::scanned all;
    for (unsigned c = 0; c < _options.cores; ++c) {
        std::string after = skip_under.empty() ? request.start_after : skip_under + "\xff";
        auto op = [this, request, after, limit] {
            return tier_ops::scan(this, request.bucket, request.prefix, after, limit);
        };
        auto part = co_await io::invoke_on(c, op);
        if (!part) co_return part.as_failure();
        all.insert(all.end(), std::make_move_iterator(part->begin()),
                   std::make_move_iterator(part->end()));
    }
    std::sort(all.begin(), all.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    store::list_page page;
    for (std::size_t i = 0; i < all.size() && i < limit; ++i) {
        const auto& [key, meta] = all[i];
        if (page.entries.size() == request.max_keys) {
            page.truncated = true;
            break;
        }
        std::size_t cut = request.delimiter.empty()
                              ? std::string::npos
                              : key.find(request.delimiter, request.prefix.size());
        if (cut != std::string::npos) {
            std::string common = key.substr(0, cut + request.delimiter.size());
            if (page.entries.empty() || page.entries.back().name != common)
                page.entries.push_back({common, true, 0, {}, 0});
            continue;
        }
        page.entries.push_back({key, false, meta.size_bytes, meta.etag, meta.modified_ms});
    }
    if (all.size() >= limit) page.truncated = true;
    co_return page;
}

base::result<std::vector<std::vector<std::pair<std::size_t, std::string>>>> tier::keys_by_core(
    const std::string& bucket, std::vector<std::string>& keys) const {
    auto& buckets = here().buckets;
    auto it = buckets.find(bucket);
    if (it == buckets.end()) return no_bucket(bucket);
    const unsigned shards = it->second.config->shards;
    std::vector<std::vector<std::pair<std::size_t, std::string>>> by_core(_options.cores);
    for (std::size_t i = 0; i < keys.size(); ++i)
        by_core[key_hash(keys[i]) % shards % _options.cores].emplace_back(i, std::move(keys[i]));
    return by_core;
}

io::task<base::result<std::vector<std::optional<std::uint64_t>>>> tier::sizes(
    std::string bucket, std::vector<std::string> keys) {
    auto grouped = keys_by_core(bucket, keys);
    if (!grouped) co_return grouped.as_failure();
    auto& by_core = *grouped;
    std::vector<std::optional<std::uint64_t>> out(keys.size());
    for (unsigned c = 0; c < _options.cores; ++c) {
        if (by_core[c].empty()) continue;
        auto op = [this, bucket, part = std::move(by_core[c])] {
            return tier_ops::sizes(this, bucket, part);
        };
        auto got = co_await io::invoke_on(c, op);
        if (!got) co_return got.as_failure();
        for (auto& [i, size] : *got) out[i] = size;
    }
    co_return out;
}

io::task<base::result<std::pair<store::block_ref, store::object_record>>> tier::read_block(
    std::string bucket, std::string key) {
    auto owner = owner_of(bucket, key);
    if (!owner) co_return owner.as_failure();
    auto op = [this, bucket, key] { return tier_ops::read(this, bucket, key); };
    co_return co_await io::invoke_on(*owner, op);
}

namespace {
struct fetch_state {
    std::vector<store::block_ref> blocks;
    base::result<void> status;
};

io::task<void> fetch_from_core(tier* t, unsigned core, std::string bucket,
                               std::vector<std::pair<std::size_t, std::string>> keys,
                               fetch_state* state) {
    auto op = [t, bucket, part = std::move(keys)] { return tier_ops::read_many(t, bucket, part); };
    auto got = co_await io::invoke_on(core, op);
    if (!got) {
        state->status = got.as_failure();
        co_return;
    }
    for (auto& [i, block] : *got) state->blocks[i] = std::move(block);
}
}  // namespace

io::task<base::result<std::vector<store::block_ref>>> tier::read_blocks(
    std::string bucket, std::vector<std::string> keys) {
    auto grouped = keys_by_core(bucket, keys);
    if (!grouped) co_return grouped.as_failure();
    auto& by_core = *grouped;
    fetch_state state;
    state.blocks.resize(keys.size());
    io::wait_group cores(_options.cores);
    for (unsigned c = 0; c < _options.cores; ++c)
        if (!by_core[c].empty())
            co_await cores.spawn(fetch_from_core(this, c, bucket, std::move(by_core[c]), &state));
    co_await cores.wait();
    if (!state.status) co_return state.status.as_failure();
    co_return std::move(state.blocks);
}

io::task<base::result<bool>> tier::write_block(std::string bucket, std::string key,
                                               std::shared_ptr<store::block_buffer> bytes,
                                               store::object_record record,
                                               store::write_conditions conditions) {
    auto owner = owner_of(bucket, key);
    if (!owner) co_return owner.as_failure();
    auto op = [this, bucket, key, bytes, record, conditions] {
        return tier_ops::write(this, bucket, key, bytes, record, conditions);
    };
    co_return co_await io::invoke_on(*owner, op);
}

tier_stats tier::local_stats() const {
    const core_state& c = here();
    tier_stats s;
    s.buckets = c.buckets.size();
    s.dram_bytes = c.dram->used_bytes();
    s.dram_evictions = c.dram->evictions();
    for (const auto& [name, view] : c.buckets)
        for (const auto& shard : view.shards) {
            if (!shard) continue;
            auto one = shard->stats();
            s.shards.blocks += one.blocks;
            s.shards.disk_bytes += one.disk_bytes;
            s.shards.reclaimed_segments += one.reclaimed_segments;
            s.shards.reinserted_blocks += one.reinserted_blocks;
            s.shards.evicted_blocks += one.evicted_blocks;
            s.shards.corrupt_blocks += one.corrupt_blocks;
        }
    return s;
}

}  // namespace fjord::kv

// `fjord cp`, `ls`, `rm`, `mb`, `rb`: the everyday object commands, on the native client (object_client).
//
// Each command runs as one coroutine on a single reactor: one core moves several GiB/s through the
// client, and the parallelism that matters is on the wire (files in flight, parts and ranges in flight
// per file, bounded by the connection pool). Local files are memory-mapped: an upload sends straight
// from the page cache, a download receives straight into a shared mapping of the new file.
//
// Exit status: 0 success, 1 a request or file failed (one line on stderr says which), 2 usage.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "client/object_client.h"
#include "client/runtime.h"
#include "io/reactor.h"
#include "io/task.h"
#include "io/wait_group.h"

namespace fjord::cli {

namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t max_parts = 10'000;

// A command line operand: s3://bucket/key or a local path.
struct location {
    bool remote = false;
    std::string bucket, key;  // remote
    std::string path;         // local
    std::string text;         // as given
};

struct command_config {
    std::string name;  // "cp", "ls", ...
    std::vector<location> operands;
    bool recursive = false;
    unsigned jobs = 8;
    std::uint64_t multipart_threshold_bytes = 8 * base::MiB;
    std::uint64_t part_size_bytes = 8 * base::MiB;
    unsigned parts_in_flight = 4;
    client::object_client_options client;
    std::optional<client::kv_bucket_request> kv;  // mb --kv
};

// One file to move.
struct transfer {
    std::string local_path;
    std::string bucket, key;
    std::uint64_t size_bytes = 0;
};

// The state of one command run; the coroutines get a pointer to it.
struct command_run {
    const command_config* config = nullptr;
    io::reactor_group* group = nullptr;
    progress_line* progress = nullptr;
    std::vector<transfer> transfers;
    bool upload = false;
    std::uint64_t files_done = 0, bytes_done = 0, failures = 0;
    std::string first_error;
    bool ok = false;

    void fail(std::string message) {
        ++failures;
        if (first_error.empty()) first_error = std::move(message);
    }
};

location parse_location(const std::string& text) {
    location out;
    out.text = text;
    if (text.rfind("s3://", 0) != 0) {
        out.path = text;
        return out;
    }
    out.remote = true;
    std::string rest = text.substr(5);
    auto slash = rest.find('/');
    out.bucket = rest.substr(0, slash);
    if (slash != std::string::npos) out.key = rest.substr(slash + 1);
    return out;
}

std::string s3_url(std::string_view bucket, std::string_view key) {
    return "s3://" + std::string(bucket) + "/" + std::string(key);
}

// "dir" -> "dir/", "" -> "" (a key prefix that names a folder).
std::string as_folder(std::string prefix) {
    if (!prefix.empty() && prefix.back() != '/') prefix += '/';
    return prefix;
}

// Part size for a multipart upload: the configured one, doubled until the parts fit S3's 10,000.
std::uint64_t part_size_for(const command_config& cfg, std::uint64_t size_bytes) {
    std::uint64_t part = cfg.part_size_bytes;
    while ((size_bytes + part - 1) / part > max_parts) part *= 2;  // bounded: 64 doublings at most
    return part;
}

// ---- transfers (coroutines: plain functions with their arguments by value) ----

io::task<void> upload_one(command_run* run, client::object_client* c, std::size_t index) {
    const transfer& t = run->transfers[index];
    int fd = ::open(t.local_path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st{};
    if (fd < 0 || fstat(fd, &st) != 0) {
        run->fail("cannot open " + t.local_path + ": " + strerror(errno));
        if (fd >= 0) ::close(fd);
        co_return;
    }
    auto size = static_cast<std::uint64_t>(st.st_size);
    void* mapped = nullptr;
    if (size > 0) {
        mapped = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (mapped == MAP_FAILED) {
            run->fail("cannot map " + t.local_path + ": " + strerror(errno));
            ::close(fd);
            co_return;
        }
        madvise(mapped, size, MADV_SEQUENTIAL);
    }
    ::close(fd);
    std::span<const std::byte> body(static_cast<const std::byte*>(mapped), size);
    const command_config& cfg = *run->config;
    auto r = size > cfg.multipart_threshold_bytes
                 ? co_await c->put_object_multipart(t.bucket, t.key, body,
                                                    {part_size_for(cfg, size), cfg.parts_in_flight})
                 : co_await c->put_object(t.bucket, t.key, body);
    if (mapped) munmap(mapped, size);
    if (!r) {
        run->fail("upload " + t.local_path + " to " + s3_url(t.bucket, t.key) + ": " +
                  r.err().message);
        co_return;
    }
    ++run->files_done, run->bytes_done += size;
    run->progress->add(1, size);
}

io::task<void> download_one(command_run* run, client::object_client* c, std::size_t index) {
    const transfer& t = run->transfers[index];
    std::error_code ec;
    fs::path parent = fs::path(t.local_path).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    int fd = ::open(t.local_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(t.size_bytes)) != 0) {
        run->fail("cannot create " + t.local_path + ": " + strerror(errno));
        if (fd >= 0) ::close(fd);
        co_return;
    }
    void* mapped = nullptr;
    if (t.size_bytes > 0) {
        mapped = mmap(nullptr, t.size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mapped == MAP_FAILED) {
            run->fail("cannot map " + t.local_path + ": " + strerror(errno));
            ::close(fd);
            co_return;
        }
    }
    std::span<std::byte> destination(static_cast<std::byte*>(mapped), t.size_bytes);
    const command_config& cfg = *run->config;
    base::result<client::get_result> r = client::get_result{};
    if (t.size_bytes > cfg.multipart_threshold_bytes)
        r = co_await c->get_object_ranges(t.bucket, t.key, 0, destination,
                                          {cfg.part_size_bytes, cfg.parts_in_flight, true});
    else if (t.size_bytes > 0)
        r = co_await c->get_object(t.bucket, t.key, destination);
    if (mapped) munmap(mapped, t.size_bytes);
    bool short_read = r && r->size_bytes != t.size_bytes;
    ::close(fd);
    if (!r || short_read) {
        ::unlink(t.local_path.c_str());
        run->fail("download " + s3_url(t.bucket, t.key) + ": " +
                  (r ? "the object changed size during the copy" : r.err().message));
        co_return;
    }
    ++run->files_done, run->bytes_done += t.size_bytes;
    run->progress->add(1, t.size_bytes);
}

io::task<void> run_transfers(command_run* run, client::object_client* c) {
    io::wait_group group(run->config->jobs);
    for (std::size_t i = 0; i < run->transfers.size() && run->failures == 0; ++i)
        co_await group.spawn(run->upload ? upload_one(run, c, i) : download_one(run, c, i));
    co_await group.wait();
}

// Every object under `prefix` (no delimiter), page by page, into run->transfers as downloads to `root`.
io::task<void> plan_downloads(command_run* run, client::object_client* c, location source,
                              std::string root) {
    std::string prefix = as_folder(source.key);
    client::list_request what{prefix, "", "", 1000};
    for (;;) {  // bounded by the bucket's keys: every page moves the continuation token forward
        auto page = co_await c->list_objects(source.bucket, what);
        if (!page) {
            run->fail("list " + s3_url(source.bucket, prefix) + ": " + page.err().message);
            co_return;
        }
        for (client::object_entry& e : page->objects) {
            if (e.key.empty() || e.key.back() == '/') continue;  // folder markers
            fs::path relative = fs::path(e.key.substr(prefix.size())).lexically_normal();
            if (relative.is_absolute() || relative.empty() || *relative.begin() == "..") {
                run->fail("refusing key " + e.key + ": it would land outside " + root);
                co_return;
            }
            run->transfers.push_back(
                {(fs::path(root) / relative).string(), source.bucket, e.key, e.size_bytes});
            run->progress->add_total_bytes(e.size_bytes);
        }
        if (!page->truncated) break;
        what.continuation_token = page->next_continuation_token;
    }
}

io::task<void> plan_one_download(command_run* run, client::object_client* c, location source,
                                 std::string target) {
    auto head = co_await c->head_object(source.bucket, source.key);
    if (!head) {
        run->fail(source.text + ": " + head.err().message);
        co_return;
    }
    if (!*head) {
        run->fail(source.text + ": no such key (or no such bucket)");
        co_return;
    }
    std::error_code ec;
    if (target.empty() || target.back() == '/' || fs::is_directory(target, ec))
        target =
            (fs::path(target.empty() ? "." : target) / fs::path(source.key).filename()).string();
    run->transfers.push_back({target, source.bucket, source.key, (*head)->size_bytes});
    run->progress->add_total_bytes((*head)->size_bytes);
}

io::task<void> cp_command(command_run* run) {
    {
        client::object_client c(run->config->client);
        const location& source = run->config->operands[0];
        const location& target = run->config->operands[1];
        if (!run->upload) {
            if (run->config->recursive)
                co_await plan_downloads(run, &c, source, target.path);
            else
                co_await plan_one_download(run, &c, source, target.path);
        }
        if (run->failures == 0) co_await run_transfers(run, &c);
        run->ok = run->failures == 0;
    }
    run->group->stop();
}

// Local files to upload (planned before the reactor starts: stat and directory walks block).
bool plan_uploads(command_run& run) {
    const location& source = run.config->operands[0];
    const location& target = run.config->operands[1];
    std::error_code ec;
    if (run.config->recursive) {
        if (!fs::is_directory(source.path, ec))
            return run.fail(source.path + " is not a directory"), false;
        std::string prefix = as_folder(target.key);
        std::vector<transfer> found;
        for (auto it = fs::recursive_directory_iterator(source.path, ec);
             !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
            if (!it->is_regular_file(ec)) continue;
            std::string relative = fs::relative(it->path(), source.path, ec).generic_string();
            found.push_back(
                {it->path().string(), target.bucket, prefix + relative, it->file_size(ec)});
        }
        if (ec) return run.fail("cannot walk " + source.path + ": " + ec.message()), false;
        std::sort(found.begin(), found.end(),
                  [](const transfer& a, const transfer& b) { return a.key < b.key; });
        run.transfers = std::move(found);
    } else {
        if (!fs::is_regular_file(source.path, ec))
            return run.fail("cannot read " + source.path + ": not a file"), false;
        std::string key = target.key;
        if (key.empty() || key.back() == '/') key += fs::path(source.path).filename().string();
        run.transfers.push_back({source.path, target.bucket, key, fs::file_size(source.path, ec)});
    }
    for (const transfer& t : run.transfers) run.progress->add_total_bytes(t.size_bytes);
    return true;
}

// ---- ls, rm, mb, rb ----

io::task<void> ls_command(command_run* run) {
    {
        client::object_client c(run->config->client);
        location where = run->config->operands.empty() ? location{} : run->config->operands[0];
        if (where.bucket.empty()) {
            auto buckets = co_await c.list_buckets();
            if (!buckets)
                run->fail("list buckets: " + buckets.err().message);
            else
                for (const auto& b : *buckets)
                    std::printf("%-24s %s\n", b.creation_date.c_str(), b.name.c_str());
        } else {
            client::list_request what{where.key, run->config->recursive ? "" : "/", "", 1000};
            for (;;) {  // bounded by the bucket's keys
                auto page = co_await c.list_objects(where.bucket, what);
                if (!page) {
                    run->fail(where.text + ": " + page.err().message);
                    break;
                }
                for (const auto& p : page->common_prefixes)
                    std::printf("%-24s %14s %s\n", "", "PRE", p.c_str());
                for (const auto& o : page->objects)
                    std::printf("%-24s %14llu %s\n", o.last_modified.c_str(),
                                static_cast<unsigned long long>(o.size_bytes), o.key.c_str());
                if (!page->truncated) break;
                what.continuation_token = page->next_continuation_token;
            }
        }
        run->ok = run->failures == 0;
    }
    run->group->stop();
}

io::task<void> rm_recursive(command_run* run, client::object_client* c, location where) {
    client::list_request what{where.key, "", "", 1000};
    std::uint64_t deleted = 0;
    for (;;) {  // bounded by the bucket's keys: each page is deleted before the next is listed
        auto page = co_await c->list_objects(where.bucket, what);
        if (!page) {
            run->fail(where.text + ": " + page.err().message);
            co_return;
        }
        std::vector<std::string> keys;
        for (const auto& o : page->objects) keys.push_back(o.key);
        if (!keys.empty()) {
            auto failures = co_await c->delete_objects(where.bucket, keys);
            if (!failures) {
                run->fail("delete objects in " + where.bucket + ": " + failures.err().message);
                co_return;
            }
            for (const auto& f : *failures)
                run->fail("delete " + s3_url(where.bucket, f.key) + ": " + f.code + " " +
                          f.message);
            deleted += keys.size() - failures->size();
        }
        if (!page->truncated || run->failures > 0) break;
        what.continuation_token = page->next_continuation_token;
    }
    std::printf("deleted %llu objects under %s\n", static_cast<unsigned long long>(deleted),
                where.text.c_str());
}

io::task<void> bucket_command(command_run* run) {
    {
        client::object_client c(run->config->client);
        const location& where = run->config->operands[0];
        const std::string& name = run->config->name;
        if (name == "mb") {
            auto r = run->config->kv ? co_await c.create_kv_bucket(where.bucket, *run->config->kv)
                                     : co_await c.create_bucket(where.bucket);
            if (!r)
                run->fail(where.text + ": " + r.err().message);
            else
                std::printf("make_bucket: %s\n", where.bucket.c_str());
        } else if (name == "rb") {
            auto r = co_await c.delete_bucket(where.bucket);
            if (!r)
                run->fail(where.text + ": " + r.err().message);
            else
                std::printf("remove_bucket: %s\n", where.bucket.c_str());
        } else if (run->config->recursive) {  // rm --recursive
            co_await rm_recursive(run, &c, where);
        } else {  // rm
            auto r = co_await c.delete_object(where.bucket, where.key);
            if (!r)
                run->fail(where.text + ": " + r.err().message);
            else
                std::printf("delete: %s\n", where.text.c_str());
        }
        run->ok = run->failures == 0;
    }
    run->group->stop();
}

// ---- command line ----

void print_usage(std::FILE* to) {
    std::fputs(
        "usage: fjord cp SRC DST [--recursive] [--jobs 8] [--part-size 8MiB] [--multipart-threshold 8MiB]\n"
        "                [--parts-in-flight 4]     (SRC or DST is s3://bucket/key, the other a local path)\n"
        "       fjord ls [s3://bucket[/prefix]] [--recursive]\n"
        "       fjord rm s3://bucket/key | fjord rm s3://bucket/prefix --recursive\n"
        "       fjord mb s3://bucket | fjord rb s3://bucket\n"
        "       fjord mb --kv s3://bucket [--capacity 16GiB] [--ttl-seconds N] [--ack nvme|dram]\n"
        "                (a KV bucket of immutable blocks: docs/kv.md)\n"
        "common: --endpoint URL (FJORD_ENDPOINT, default http://127.0.0.1:9000; https:// verifies the\n"
        "        server against --ca-cert PEM (FJORD_CA_CERT) or the system's CAs),\n"
        "        --access-key K (FJORD_ACCESS_KEY), --secret-key S (FJORD_SECRET_KEY)\n",
        to);
}

std::string setting(const command_options& opts, std::string_view flag, const char* env,
                    const char* fallback) {
    if (opts.has(flag)) return opts.text(flag);
    const char* value = std::getenv(env);
    return value && *value ? value : fallback;
}

// Checks the operands: how many, and which must be s3:// URLs.
base::result<void> check_operands(const command_config& cfg) {
    const auto& ops = cfg.operands;
    auto usage = [&cfg](const std::string& what) {
        return base::fail(base::errc::invalid_argument, cfg.name + " " + what);
    };
    if (cfg.name == "cp") {
        if (ops.size() != 2) return usage("needs SRC and DST");
        if (ops[0].remote == ops[1].remote)
            return usage("copies between a local path and s3://bucket/key (one side each)");
        for (const auto& o : ops)
            if (o.remote && o.bucket.empty()) return usage("needs a bucket in " + o.text);
        if (ops[0].remote && !cfg.recursive && ops[0].key.empty())
            return usage("needs a key in the source (or --recursive)");
        return {};
    }
    if (cfg.name == "ls") {
        if (ops.size() > 1 || (ops.size() == 1 && !ops[0].remote))
            return usage("takes at most one s3:// URL");
        return {};
    }
    if (ops.size() != 1 || !ops[0].remote || ops[0].bucket.empty())
        return usage("needs one s3://bucket URL");
    if (cfg.name == "rm" && !cfg.recursive && ops[0].key.empty())
        return usage("needs a key (or --recursive)");
    if ((cfg.name == "mb" || cfg.name == "rb") && !ops[0].key.empty())
        return usage("takes a bucket, not a key");
    return {};
}

// mb --kv and its options.
base::result<void> parse_kv_options(const command_options& opts, command_config& cfg) {
    const bool kv_option = opts.has("capacity") || opts.has("ttl-seconds") || opts.has("ack");
    if (!opts.has("kv")) {
        if (kv_option)
            return base::fail(base::errc::invalid_argument,
                              "--capacity, --ttl-seconds and --ack go with mb --kv");
        return {};
    }
    if (cfg.name != "mb") return base::fail(base::errc::invalid_argument, "--kv goes with mb");
    client::kv_bucket_request kv;
    auto capacity = opts.size("capacity", 0);
    auto ttl = opts.number("ttl-seconds", 0);
    if (!capacity) return capacity.as_failure();
    if (!ttl) return ttl.as_failure();
    kv.capacity_bytes = *capacity;
    kv.ttl_seconds = *ttl;
    std::string ack = opts.has("ack") ? opts.text("ack") : "nvme";
    if (ack != "nvme" && ack != "dram")
        return base::fail(base::errc::invalid_argument, "--ack is nvme or dram");
    kv.ack_from_dram = ack == "dram";
    cfg.kv = kv;
    return {};
}

base::result<command_config> parse_command(std::string name, int argc, char** argv) {
    static constexpr std::string_view with_value[] = {
        "endpoint",        "access-key", "secret-key",  "jobs", "part-size", "multipart-threshold",
        "parts-in-flight", "capacity",   "ttl-seconds", "ack",  "ca-cert"};
    static constexpr std::string_view flags[] = {"recursive", "kv"};
    command_config cfg;
    cfg.name = std::move(name);
    std::vector<char*> options;
    for (int i = 0; i < argc; ++i) {
        std::string_view arg = argv[i];
        if (arg == "-r") arg = "--recursive", argv[i] = const_cast<char*>("--recursive");
        if (arg.substr(0, 2) != "--" || arg == "--") {
            cfg.operands.push_back(parse_location(argv[i]));
            continue;
        }
        options.push_back(argv[i]);
        bool takes_value = std::find(std::begin(with_value), std::end(with_value), arg.substr(2)) !=
                           std::end(with_value);
        if (takes_value && i + 1 < argc) options.push_back(argv[++i]);
    }
    auto opts =
        command_options::parse(static_cast<int>(options.size()), options.data(), with_value, flags);
    if (!opts) return opts.as_failure();
    cfg.recursive = opts->has("recursive");
    auto jobs = opts->number("jobs", 8), in_flight = opts->number("parts-in-flight", 4);
    auto part = opts->size("part-size", 8 * base::MiB),
         threshold = opts->size("multipart-threshold", 8 * base::MiB);
    for (auto* r : {&jobs, &in_flight, &part, &threshold})
        if (!*r) return r->as_failure();
    if (*jobs < 1 || *jobs > 1024 || *in_flight < 1 || *in_flight > 256)
        return base::fail(base::errc::invalid_argument,
                          "need --jobs 1..1024 and --parts-in-flight 1..256");
    if (*part < 5 * base::MiB || *part > 5 * base::GiB)
        return base::fail(base::errc::invalid_argument, "--part-size must be 5 MiB..5 GiB");
    cfg.jobs = static_cast<unsigned>(*jobs);
    cfg.parts_in_flight = static_cast<unsigned>(*in_flight);
    cfg.part_size_bytes = *part;
    cfg.multipart_threshold_bytes = std::max<std::uint64_t>(*threshold, 1);
    FJORD_TRY(parse_kv_options(*opts, cfg));
    // An https server is verified against --ca-cert (FJORD_CA_CERT), or the system's CAs without it.
    FJORD_TRY(client::configure_endpoint(
        cfg.client.client, setting(*opts, "endpoint", "FJORD_ENDPOINT", "http://127.0.0.1:9000"),
        setting(*opts, "ca-cert", "FJORD_CA_CERT", "")));
    cfg.client.client.credentials.access_key =
        setting(*opts, "access-key", "FJORD_ACCESS_KEY", "fjordadmin");
    cfg.client.client.credentials.secret_key =
        setting(*opts, "secret-key", "FJORD_SECRET_KEY", "fjordadmin-secret");
    // Enough connections for every file in flight to keep its parts moving, within a sane bound.
    cfg.client.pool.max_connections =
        std::clamp<std::size_t>(std::size_t{cfg.jobs} * cfg.parts_in_flight, 16, 256);
    FJORD_TRY(check_operands(cfg));
    return cfg;
}

using command_function = io::task<void> (*)(command_run* run);

void run_on_reactor(command_run& run, command_function fn) {
    io::reactor_group group(1);
    run.group = &group;
    group.run([&run, fn](unsigned) { io::spawn(fn(&run)); });
    run.group = nullptr;
}

}  // namespace

int object_command_main(const std::string& name, int argc, char** argv) {
    for (int i = 0; i < argc; ++i)
        if (std::string_view(argv[i]) == "-h" || std::string_view(argv[i]) == "--help")
            return print_usage(stdout), 0;
    auto cfg = parse_command(name, argc, argv);
    if (!cfg) {
        std::fprintf(stderr, "fjord %s: %s\n", name.c_str(), cfg.err().message.c_str());
        print_usage(stderr);
        return 2;
    }
    command_run run;
    run.config = &*cfg;
    progress_line progress({.label = name, .item_name = "files"});
    run.progress = &progress;
    std::int64_t start_ns = base::monotonic_now_ns();
    if (name == "cp") {
        run.upload = !cfg->operands[0].remote;
        if (!run.upload || plan_uploads(run)) run_on_reactor(run, cp_command);
    } else {
        run_on_reactor(run, name == "ls" ? ls_command : bucket_command);
    }
    progress.finish();
    if (!run.ok || run.failures > 0) {
        std::fprintf(stderr, "fjord %s: %s", name.c_str(), run.first_error.c_str());
        if (run.failures > 1)
            std::fprintf(stderr, " (and %llu more failures)",
                         static_cast<unsigned long long>(run.failures - 1));
        std::fputc('\n', stderr);
        return 1;
    }
    if (name == "cp") {
        double seconds = static_cast<double>(base::monotonic_now_ns() - start_ns) / 1e9;
        std::printf(
            "%s %llu file%s, %s in %.2f s (%.3f GiB/s)\n", run.upload ? "uploaded" : "downloaded",
            static_cast<unsigned long long>(run.files_done), run.files_done == 1 ? "" : "s",
            format_bytes(run.bytes_done).c_str(), seconds, gib_per_s(run.bytes_done, seconds));
    }
    return 0;
}

}  // namespace fjord::cli

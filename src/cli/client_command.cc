// `fjord client`: one request (or one parallel transfer) through the native client's object_client,
// from the command line. It exists so that scripts and the integration tests can drive multipart
// uploads, ranged downloads, the CRC32C trailer and the retry logic against any endpoint; it prints
// one JSON line with the outcome and the client's request counters.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/checksum.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "client/object_client.h"
#include "client/runtime.h"
#include "io/reactor.h"
#include "io/task.h"

namespace fjord::cli {

namespace {

struct client_command {
    std::string op;
    std::string bucket, key, file;
    bool multipart = false;
    client::multipart_options multipart_how;
    client::ranged_get_options ranged_how;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;  // 0: the whole object (a HEAD sizes the buffer)
    client::object_client_options options;
};

struct client_outcome {
    bool ok = false;
    std::string error;
    std::uint64_t bytes = 0;
    std::string etag;
    std::uint32_t crc32c = 0;
    client::request_counters counters;
    std::size_t connections = 0;
    std::uint64_t connections_reused = 0;
};

std::span<std::byte> map_file(const std::string& path, std::uint64_t& size, std::string& error) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st{};
    if (fd < 0 || fstat(fd, &st) != 0) {
        error = "cannot open " + path + ": " + strerror(errno);
        if (fd >= 0) ::close(fd);
        return {};
    }
    size = static_cast<std::uint64_t>(st.st_size);
    if (size == 0) {
        ::close(fd);
        return {};
    }
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) {
        error = "cannot map " + path;
        return {};
    }
    return {static_cast<std::byte*>(p), size};
}

io::task<void> run_get(client::object_client& c, const client_command* cmd, client_outcome* out) {
    std::uint64_t length = cmd->length;
    if (length == 0) {
        auto head = co_await c.head_object(cmd->bucket, cmd->key);
        if (!head || !*head) {
            out->error = head ? "no such key" : head.err().message;
            co_return;
        }
        length = (*head)->size_bytes > cmd->offset ? (*head)->size_bytes - cmd->offset : 0;
    }
    std::vector<std::byte> buffer(length);
    auto r =
        co_await c.get_object_ranges(cmd->bucket, cmd->key, cmd->offset, buffer, cmd->ranged_how);
    if (!r) {
        out->error = r.err().message;
        co_return;
    }
    out->bytes = r->size_bytes;
    out->etag = r->etag;
    out->crc32c = base::crc32c(std::span(buffer).first(r->size_bytes));
    if (!cmd->file.empty()) {
        std::FILE* f = std::fopen(cmd->file.c_str(), "wb");
        bool written = f && std::fwrite(buffer.data(), 1, r->size_bytes, f) == r->size_bytes;
        if (f) written = std::fclose(f) == 0 && written;
        if (!written) {
            out->error = "cannot write " + cmd->file;
            co_return;
        }
    }
    out->ok = true;
}

io::task<void> run_put(client::object_client& c, const client_command* cmd, client_outcome* out) {
    std::uint64_t size = 0;
    std::span<std::byte> body = map_file(cmd->file, size, out->error);
    if (!out->error.empty()) co_return;
    auto r = cmd->multipart
                 ? co_await c.put_object_multipart(cmd->bucket, cmd->key, body, cmd->multipart_how)
                 : co_await c.put_object(cmd->bucket, cmd->key, body);
    out->crc32c = base::crc32c(body);
    if (!body.empty()) munmap(body.data(), body.size());
    if (!r) {
        out->error = r.err().message;
        co_return;
    }
    out->ok = true;
    out->bytes = size;
    out->etag = r->etag;
}

io::task<void> run_command(const client_command* cmd, client_outcome* out,
                           io::reactor_group* group) {
    {
        client::object_client c(cmd->options);
        if (cmd->op == "put") {
            co_await run_put(c, cmd, out);
        } else if (cmd->op == "get") {
            co_await run_get(c, cmd, out);
        } else if (cmd->op == "head") {
            auto r = co_await c.head_object(cmd->bucket, cmd->key);
            if (!r)
                out->error = r.err().message;
            else if (!*r)
                out->error = "no such key";
            else
                out->ok = true, out->bytes = (*r)->size_bytes, out->etag = (*r)->etag;
        } else if (cmd->op == "delete") {
            auto r = co_await c.delete_object(cmd->bucket, cmd->key);
            if (!r) out->error = r.err().message;
            out->ok = r.has_value();
        } else {  // "mb"
            auto r = co_await c.create_bucket(cmd->bucket);
            if (!r) out->error = r.err().message;
            out->ok = r.has_value();
        }
        out->counters = c.counters();
        out->connections = c.pool().size();
        out->connections_reused = c.pool().connections_reused();
    }
    group->stop();
}

base::result<client_command> parse_client_args(int argc, char** argv) {
    static constexpr std::string_view with_value[] = {
        "endpoint",    "bucket",     "key",    "file",     "part-size",   "in-flight",
        "range-size",  "offset",     "length", "attempts", "deadline-ms", "io-timeout-ms",
        "connections", "backoff-ms", "seed",   "ca-cert"};
    static constexpr std::string_view flags[] = {"multipart", "trailer"};
    if (argc < 1) return base::fail(base::errc::invalid_argument, "missing operation");
    client_command cmd;
    cmd.op = argv[0];
    if (cmd.op != "put" && cmd.op != "get" && cmd.op != "head" && cmd.op != "delete" &&
        cmd.op != "mb")
        return base::fail(base::errc::invalid_argument,
                          "operation must be put, get, head, delete or mb");
    auto opts = command_options::parse(argc - 1, argv + 1, with_value, flags);
    if (!opts) return opts.as_failure();
    FJORD_TRY(client::configure_endpoint(cmd.options.client,
                                         opts->text("endpoint", "http://127.0.0.1:9000"),
                                         opts->text("ca-cert")));
    cmd.bucket = opts->text("bucket");
    cmd.key = opts->text("key");
    cmd.file = opts->text("file");
    if (cmd.bucket.empty() || (cmd.op != "mb" && cmd.key.empty()))
        return base::fail(base::errc::invalid_argument, "--bucket and --key are required");
    if (cmd.op == "put" && cmd.file.empty())
        return base::fail(base::errc::invalid_argument, "put needs --file");
    auto part = opts->size("part-size", 8 * base::MiB),
         range = opts->size("range-size", 8 * base::MiB);
    auto in_flight = opts->number("in-flight", 4), offset = opts->number("offset", 0),
         length = opts->size("length", 0), attempts = opts->number("attempts", 4),
         deadline = opts->number("deadline-ms", 120'000),
         io_timeout = opts->number("io-timeout-ms", 60'000),
         connections = opts->number("connections", 16), backoff = opts->number("backoff-ms", 50),
         seed = opts->number("seed", 0);
    for (auto* r : {&part, &range, &in_flight, &offset, &length, &attempts, &deadline, &io_timeout,
                    &connections, &backoff, &seed})
        if (!*r) return r->as_failure();
    if (*part == 0 || *range == 0 || *in_flight == 0 || *in_flight > 1024 || *attempts == 0 ||
        *connections == 0)
        return base::fail(base::errc::invalid_argument,
                          "sizes, --in-flight, --attempts and --connections must be positive");
    cmd.multipart = opts->has("multipart");
    cmd.multipart_how = {*part, static_cast<unsigned>(*in_flight)};
    cmd.ranged_how = {*range, static_cast<unsigned>(*in_flight), false};
    cmd.offset = *offset;
    cmd.length = *length;
    cmd.options.retry.max_attempts = static_cast<unsigned>(*attempts);
    cmd.options.retry.request_deadline_ms = static_cast<std::int64_t>(*deadline);
    cmd.options.retry.initial_backoff_ms = static_cast<std::int64_t>(*backoff);
    cmd.options.retry.jitter_seed = *seed;
    cmd.options.client.io_timeout_ms = static_cast<std::int64_t>(*io_timeout);
    cmd.options.pool.max_connections = *connections;
    cmd.options.put.crc32c_trailer = opts->has("trailer");
    cmd.options.client.credentials = client::credentials_from_environment();
    return cmd;
}

}  // namespace

void print_client_usage(std::FILE* to) {
    std::fputs(
        "usage: fjord client put|get|head|delete|mb --bucket B [--key K] "
        "[--endpoint http://127.0.0.1:9000] [--file F] [--multipart] [--part-size 8MiB] "
        "[--range-size 8MiB] [--in-flight 4] [--offset N] [--length N] [--trailer] [--attempts 4] "
        "[--deadline-ms 120000] [--io-timeout-ms 60000] [--backoff-ms 50] [--connections 16] "
        "[--seed N]\ncredentials come from FJORD_ACCESS_KEY / FJORD_SECRET_KEY\n",
        to);
}

int client_main(int argc, char** argv) {
    if (asks_for_help(argc, argv)) return print_client_usage(stdout), 0;
    auto cmd = parse_client_args(argc, argv);
    if (!cmd) {
        std::fprintf(stderr, "fjord client: %s\n", cmd.err().message.c_str());
        print_client_usage(stderr);
        return 2;
    }
    client_outcome out;
    io::reactor_group group(1);
    group.run([&cmd, &out, &group](unsigned) { io::spawn(run_command(&*cmd, &out, &group)); });
    std::printf(
        "{\"op\": %s, \"ok\": %s, \"error\": %s, \"bytes\": %llu, \"etag\": %s, \"crc32c\": %u, "
        "\"requests\": %llu, \"attempts\": %llu, \"retries\": %llu, \"gave_up\": %llu, "
        "\"connections\": %zu, \"connections_reused\": %llu}\n",
        json_string(cmd->op).c_str(), out.ok ? "true" : "false", json_string(out.error).c_str(),
        static_cast<unsigned long long>(out.bytes), json_string(out.etag).c_str(), out.crc32c,
        static_cast<unsigned long long>(out.counters.requests),
        static_cast<unsigned long long>(out.counters.attempts),
        static_cast<unsigned long long>(out.counters.retries),
        static_cast<unsigned long long>(out.counters.gave_up), out.connections,
        static_cast<unsigned long long>(out.connections_reused));
    return out.ok ? 0 : 1;
}

}  // namespace fjord::cli

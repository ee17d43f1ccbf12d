// `fjord scrub`: reads every stored object and checks every block against its CRC32C, offline.
//
// The data directories are locked while it runs (a running server holds the same lock, so scrub refuses
// to start next to one). Every corrupt or unreadable object is printed with its bucket and key; the exit
// status is 1 if there was any.

#include <cstdio>
#include <string>
#include <vector>

#include "base/log.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "io/reactor.h"
#include "io/task.h"
#include "store/data_file.h"
#include "store/engine.h"

namespace fjord::cli {

namespace {
class discard_sink final : public store::byte_sink {
public:
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        bytes += data.size();
        co_return base::result<void>{};
    }
    std::uint64_t bytes = 0;
};

struct scrub_totals {
    std::uint64_t objects = 0;
    std::uint64_t bytes = 0;
    std::uint64_t bad = 0;
};

io::task<void> scrub_all(store::engine* engine, scrub_totals* totals, io::reactor_group* group) {
    for (auto& object : engine->local_objects()) {
        discard_sink sink;
        auto read = co_await store::read_object(engine->drives(), engine->pool(), object.record, 0,
                                                object.record.size_bytes, sink,
                                                engine->data_file_settings());
        ++totals->objects;
        totals->bytes += sink.bytes;
        if (!read) {
            ++totals->bad;
            std::string version = object.record.version_id.empty()
                                      ? std::string()
                                      : " (version " + object.record.version_id + ")";
            std::printf("CORRUPT s3://%s/%s%s: %s\n", object.bucket.c_str(), object.key.c_str(),
                        version.c_str(), read.err().message.c_str());
        }
    }
    group->stop();
}
}  // namespace

void print_scrub_usage(std::FILE* to) {
    std::fputs("usage: fjord scrub --data DIR [--data DIR ...]  (the server must be stopped)\n",
               to);
}

int scrub_main(int argc, char** argv) {
    if (asks_for_help(argc, argv)) return print_scrub_usage(stdout), 0;
    store::engine_options options;
    options.data_dirs.clear();
    options.cores = 1;
    for (int i = 0; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--data" && i + 1 < argc)
            options.data_dirs.push_back(argv[++i]);
        else {
            print_scrub_usage(stderr);
            return 2;
        }
    }
    if (options.data_dirs.empty()) options.data_dirs.push_back("./data");
    auto opened = store::engine::open(options);
    if (!opened) {
        std::fprintf(stderr, "fjord scrub: %s\n", opened.err().message.c_str());
        return 1;
    }
    std::unique_ptr<store::engine> engine = std::move(*opened);
    scrub_totals totals;
    io::reactor_group group(1);
    group.run([&](unsigned core) {
        engine->attach_core(core, io::reactor::current().ring());
        io::spawn(scrub_all(engine.get(), &totals, &group));
    });
    std::printf("scrubbed %llu objects, %llu bytes: %llu corrupt\n",
                static_cast<unsigned long long>(totals.objects),
                static_cast<unsigned long long>(totals.bytes),
                static_cast<unsigned long long>(totals.bad));
    return totals.bad == 0 ? 0 : 1;
}

}  // namespace fjord::cli

// The reactor side of client_runtime: one `serve` coroutine per thread sleeps in an io_uring read of
// the thread's eventfd; each wake-up takes the queued jobs (under the core's mutex) and spawns them.

#include "client/runtime.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>

#include "io/ops.h"

namespace fjord::client {

struct client_runtime::core_state {
    int event_fd = -1;
    std::uint64_t event_value = 0;  // the eventfd read's destination
    std::mutex mutex;
    std::deque<runtime_job*> queue;
    bool stopping = false;
    unsigned in_flight = 0;  // reactor thread only
    std::unique_ptr<object_client> client;
};

auth::credentials credentials_from_environment() {
    const char* access = std::getenv("FJORD_ACCESS_KEY");
    const char* secret = std::getenv("FJORD_SECRET_KEY");
    return {access && *access ? access : "fjordadmin",
            secret && *secret ? secret : "fjordadmin-secret"};
}

base::result<void> configure_endpoint(client_options& options, std::string_view url,
                                      const std::string& ca_cert_path) {
    std::string value(url);
    const bool https = value.rfind("https://", 0) == 0;
    if (https)
        value = value.substr(8);
    else if (value.rfind("http://", 0) == 0)
        value = value.substr(7);
    while (!value.empty() && value.back() == '/') value.pop_back();
    if (value.find(':') == std::string::npos) value += https ? ":443" : ":80";
    auto parsed =
        value.find("://") == std::string::npos
            ? io::parse_endpoint(value)
            : base::result<io::endpoint>(base::fail(base::errc::invalid_argument, "scheme"));
    if (!parsed)
        return base::fail(base::errc::invalid_argument,
                          "not an http(s)://IP:port endpoint: " + std::string(url));
    options.endpoint = *parsed;
    options.tls = nullptr;
    if (https) {
        auto made = tls::context::client(ca_cert_path, true);
        if (!made) return made.as_failure();
        options.tls = std::move(*made);
    }
    return {};
}

void waited_job::finished() {
    std::lock_guard lock(_mutex);
    _done = true;
    _cv.notify_one();
}

void waited_job::wait() {
    std::unique_lock lock(_mutex);
    _cv.wait(lock, [this] { return _done; });
}

base::result<std::unique_ptr<client_runtime>> client_runtime::start(object_client_options options,
                                                                    unsigned threads) {
    if (threads == 0 || threads > 64)
        return base::fail(base::errc::invalid_argument, "threads must be 1 to 64");
    if (auto probe = io::probe_kernel_features(); !probe) return probe.as_failure();
    std::unique_ptr<client_runtime> rt(new client_runtime());
    rt->_options = std::move(options);
    for (unsigned i = 0; i < threads; ++i) {
        auto core = std::make_unique<core_state>();
        core->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (core->event_fd < 0) {
            int e = errno;
            for (auto& made : rt->_cores) ::close(made->event_fd);
            rt->_cores.clear();
            return base::fail(base::errc::internal, std::string("eventfd: ") + std::strerror(e));
        }
        rt->_cores.push_back(std::move(core));
    }
    rt->_group = std::make_unique<io::reactor_group>(threads);
    rt->_cores_running.store(threads);
    client_runtime* raw = rt.get();
    rt->_runner = std::thread([raw] {
        raw->_group->run([raw](unsigned core) { io::spawn(serve(raw, raw->_cores[core].get())); });
    });
    return rt;
}

client_runtime::~client_runtime() {
    for (auto& core : _cores) {
        {
            std::lock_guard lock(core->mutex);
            core->stopping = true;
        }
        std::uint64_t one = 1;
        ssize_t n = ::write(core->event_fd, &one, sizeof one);
        (void)n;
    }
    if (_runner.joinable()) _runner.join();
    for (auto& core : _cores) ::close(core->event_fd);
}

io::task<void> client_runtime::run_job(core_state* core, runtime_job* job) {
    ++core->in_flight;
    co_await job->run(*core->client);
    --core->in_flight;
    job->finished();
}

io::task<void> client_runtime::serve(client_runtime* owner, core_state* core) {
    core->client = std::make_unique<object_client>(owner->_options);
    for (bool stop = false; !stop;) {  // one round per wake-up, until the destructor asks to stop
        int fd = core->event_fd;
        std::uint64_t* value = &core->event_value;
        int rc = co_await io::make_op(
            [fd, value](io_uring_sqe* s) { io_uring_prep_read(s, fd, value, sizeof *value, 0); });
        FJORD_ASSERT(rc == sizeof *value || rc == -EAGAIN || rc == -EINTR, "eventfd read failed");
        std::deque<runtime_job*> batch;
        {
            std::lock_guard lock(core->mutex);
            batch.swap(core->queue);
            stop = core->stopping;
        }
        for (runtime_job* j : batch) io::spawn(run_job(core, j));
    }
    while (core->in_flight > 0) co_await io::sleep_for(1);  // jobs submitted before the stop finish
    core->client.reset();
    if (owner->_cores_running.fetch_sub(1) == 1) owner->_group->stop();
}

void client_runtime::submit(runtime_job* job) {
    core_state& core = *_cores[_next_core.fetch_add(1, std::memory_order_relaxed) % _cores.size()];
    {
        std::lock_guard lock(core.mutex);
        core.queue.push_back(job);
    }
    std::uint64_t one = 1;
    ssize_t n = ::write(core.event_fd, &one, sizeof one);
    (void)n;  // EAGAIN: the counter is already non-zero, so the reactor wakes anyway
}

void client_runtime::run_and_wait(waited_job& job) {
    submit(&job);
    job.wait();
}

}  // namespace fjord::client

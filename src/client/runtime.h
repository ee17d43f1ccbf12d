#pragma once

// client_runtime: the client's reactor threads, for callers that are not coroutines on a reactor (the
// C ABI, the Python package). Each thread runs an io_uring reactor with its own object_client and
// sleeps in a read of its eventfd; a caller hands it a job (round robin over the threads), the job runs
// as a coroutine there, and the runtime calls the job's finished() on that thread when it ends. Many
// jobs share each thread's connection pool, and no caller ever blocks a reactor thread.
//
// Lifecycle: start() creates the threads; the destructor lets the jobs in flight finish, then stops and
// joins them. After fork() the child has none of the threads: a child must neither use nor destroy a
// runtime it inherited (leak it; its memory is a copy), and starts one of its own.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "base/result.h"
#include "client/object_client.h"
#include "io/reactor.h"
#include "io/socket.h"
#include "io/task.h"

namespace fjord::client {

// "http://host:port", "host:port", "http://host" (port 80) or "https://host[:port]" (port 443): sets
// options.endpoint and, for https, options.tls, a context that verifies the server against the CA
// certificates in ca_cert_path (PEM), or the system's when it is empty.
base::result<void> configure_endpoint(client_options& options, std::string_view url,
                                      const std::string& ca_cert_path);

// The key pair in FJORD_ACCESS_KEY / FJORD_SECRET_KEY, or, for either that is unset or empty, the
// development pair of README.md (fjordadmin / fjordadmin-secret), as `fjord serve` defaults on loopback.
auth::credentials credentials_from_environment();

class runtime_job {
public:
    virtual ~runtime_job() = default;
    // Runs on a reactor thread with that thread's client. The job outlives the task.
    virtual io::task<void> run(object_client& client) = 0;
    // Called on the same thread once run() ended; the job may be destroyed from here on.
    virtual void finished() = 0;
};

// A job a calling thread waits for: run_and_wait() returns once finished() was called.
class waited_job : public runtime_job {
public:
    void finished() final;
    void wait();

private:
    std::mutex _mutex;
    std::condition_variable _cv;
    bool _done = false;
};

class client_runtime {
public:
    static base::result<std::unique_ptr<client_runtime>> start(object_client_options options,
                                                               unsigned threads);
    ~client_runtime();
    client_runtime(const client_runtime&) = delete;
    client_runtime& operator=(const client_runtime&) = delete;

    // Thread-safe. The job runs on one of the threads; `job` must live until its finished().
    void submit(runtime_job* job);
    // Submits and blocks the calling thread until the job finished.
    void run_and_wait(waited_job& job);
    unsigned threads() const { return static_cast<unsigned>(_cores.size()); }
    const object_client_options& options() const { return _options; }

private:
    struct core_state;
    client_runtime() = default;
    static io::task<void> serve(client_runtime* owner, core_state* core);
    static io::task<void> run_job(core_state* core, runtime_job* job);

    object_client_options _options;
    std::vector<std::unique_ptr<core_state>> _cores;
    std::unique_ptr<io::reactor_group> _group;
    std::thread _runner;
    std::atomic<unsigned> _next_core{0};
    std::atomic<unsigned> _cores_running{0};
};

}  // namespace fjord::client

#pragma once

// The seed loop both simulations share: runs COUNT seeds from FIRST one after another, each under a
// watchdog, prints a failure with its seed and the command that replays it, and a summary at the end.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace fjord::sim {

struct seed_outcome {
    std::string failure;  // empty: the seed passed
    std::string summary;  // what the seed did, one line
};

namespace detail {
inline volatile std::uint64_t g_current_seed = 0;
inline const char* g_program = "sim";

inline void on_watchdog(int) {
    char msg[200];
    int n = std::snprintf(msg, sizeof msg, "%s: seed %llu hung (watchdog); replay with --seed %llu\n",
                          g_program, static_cast<unsigned long long>(g_current_seed),
                          static_cast<unsigned long long>(g_current_seed));
    (void)!::write(2, msg, static_cast<std::size_t>(n));
    ::_exit(2);
}
}  // namespace detail

// run(seed) runs one seed; totals() describes all seeds run so far. Returns the process exit status.
inline int run_seeds(const char* program, std::uint64_t first, std::uint64_t count, bool verbose,
                     const std::function<seed_outcome(std::uint64_t)>& run,
                     const std::function<std::string()>& totals) {
    detail::g_program = program;
    ::signal(SIGALRM, detail::on_watchdog);
    auto started = std::chrono::steady_clock::now();
    std::uint64_t failures = 0;
    for (std::uint64_t seed = first; seed < first + count; ++seed) {
        detail::g_current_seed = seed;
        ::alarm(120);
        seed_outcome done = run(seed);
        ::alarm(0);
        unsigned long long s = seed;
        if (!done.failure.empty()) {
            ++failures;
            std::printf("FAIL seed %llu: %s\n  %s\n  replay: %s --seed %llu\n", s,
                        done.failure.c_str(), done.summary.c_str(), program, s);
        } else if (verbose || count == 1) {
            std::printf("ok seed %llu: %s\n", s, done.summary.c_str());
        }
        std::fflush(stdout);
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("%s: %llu seeds from %llu, %llu failed, %.1f s\n", program,
                static_cast<unsigned long long>(count), static_cast<unsigned long long>(first),
                static_cast<unsigned long long>(failures), seconds);
    std::printf("  in all: %s\n", totals().c_str());
    return failures ? 1 : 0;
}

}  // namespace fjord::sim

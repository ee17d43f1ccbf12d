#pragma once

// The seed loop both simulations share: runs COUNT seeds from FIRST one after another, each under a
// watchdog, prints a failure with its seed and the command that replays it, and a summary at the end.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
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
    int n =
        std::snprintf(msg, sizeof msg, "%s: seed %llu hung (watchdog); replay with --seed %llu\n",
                      g_program, static_cast<unsigned long long>(g_current_seed),
                      static_cast<unsigned long long>(g_current_seed));
    (void)!::write(2, msg, static_cast<std::size_t>(n));
    ::_exit(2);
}
}  // namespace detail

struct seed_args {
    std::uint64_t first_seed = 1;
    std::uint64_t seeds = 1;
    bool verbose = false;
};

struct count_option {
    const char* name;  // without the leading "--"
    unsigned* value;
};

// Parses --seed N, --seeds COUNT, --verbose and each `--NAME N` of `more`; false on anything else.
inline bool parse_seed_args(int argc, char** argv, seed_args& args,
                            std::initializer_list<count_option> more) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (a == "--verbose") {
            args.verbose = true;
            continue;
        }
        if (!v || a.rfind("--", 0) != 0) return false;
        ++i;
        if (a == "--seed") {
            args.first_seed = std::strtoull(v, nullptr, 10);
            continue;
        }
        if (a == "--seeds") {
            args.seeds = std::strtoull(v, nullptr, 10);
            continue;
        }
        bool known = false;
        for (const count_option& o : more)
            if (a.compare(2, std::string::npos, o.name) == 0) {
                *o.value = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
                known = true;
            }
        if (!known) return false;
    }
    return args.seeds > 0;
}

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

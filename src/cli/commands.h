#pragma once

// The `fjord` subcommands other than `serve` (main.cc) and `bench` (src/bench).

#include <cstdio>
#include <string>

namespace fjord::cli {

// The usage of each command, for its --help (stdout) and its usage errors (stderr).
void print_client_usage(std::FILE* to);
void print_admin_usage(std::FILE* to);
void print_cluster_usage(std::FILE* to);
void print_scrub_usage(std::FILE* to);

// Written at build time (src/cli/commit.cmake): the project's version and the git commit built.
extern const char* const build_version;
extern const char* const build_commit;

// `fjord client`: one request or transfer through the native client (client_command.cc).
int client_main(int argc, char** argv);
// `fjord cp|ls|rm|mb|rb` (object_commands.cc); `name` is the subcommand.
int object_command_main(const std::string& name, int argc, char** argv);
// `fjord admin user add|rm|ls` (admin_command.cc).
int admin_main(int argc, char** argv);
// `fjord cluster status|remove-node` (cluster_command.cc).
int cluster_main(int argc, char** argv);
// `fjord scrub` (scrub.cc).
int scrub_main(int argc, char** argv);

}  // namespace fjord::cli

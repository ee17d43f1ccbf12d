#pragma once

// The `fjord` subcommands other than `serve` (main.cc) and `bench` (src/bench).

#include <string>

namespace fjord::cli {

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

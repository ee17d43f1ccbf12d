// `fjord admin user add|rm|ls`: the users of a Fjord server through its admin API (docs/security.md,
// "Users"), signed with the root user's FJORD_ACCESS_KEY / FJORD_SECRET_KEY. A new user's secret is read
// from standard input (one line), so that it is in no command line or shell history.

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "client/runtime.h"
#include "client/s3_client.h"
#include "io/reactor.h"
#include "io/task.h"

namespace fjord::cli {

namespace {

struct admin_command {
    std::string op;  // add, rm, ls
    std::string access_key;
    std::optional<std::string> secret;
    client::client_options options;
};

struct admin_outcome {
    base::result<void> status;
    std::vector<std::string> users;
};

io::task<void> run_admin(const admin_command* cmd, admin_outcome* out, io::reactor_group* group) {
    client::s3_client c(cmd->options);
    if (cmd->op == "ls") {
        auto users = co_await c.list_users();
        if (users)
            out->users = std::move(*users);
        else
            out->status = users.as_failure();
    } else {
        out->status = co_await c.set_user(cmd->access_key, cmd->secret);
    }
    group->stop();
}

base::result<admin_command> parse_admin_args(int argc, char** argv) {
    static constexpr std::string_view with_value[] = {"endpoint", "ca-cert"};
    if (argc < 2 || std::string_view(argv[0]) != "user")
        return base::fail(base::errc::invalid_argument, "expected: user add|rm|ls");
    admin_command cmd;
    cmd.op = argv[1];
    int first_option = 2;
    if (cmd.op == "add" || cmd.op == "rm") {
        if (argc < 3 || argv[2][0] == '-')
            return base::fail(base::errc::invalid_argument, cmd.op + " needs an access key");
        cmd.access_key = argv[2];
        first_option = 3;
    } else if (cmd.op != "ls") {
        return base::fail(base::errc::invalid_argument, "expected: user add|rm|ls");
    }
    auto opts = command_options::parse(argc - first_option, argv + first_option, with_value, {});
    if (!opts) return opts.as_failure();
    FJORD_TRY(client::configure_endpoint(
        cmd.options, opts->text("endpoint", "http://127.0.0.1:9000"), opts->text("ca-cert")));
    cmd.options.credentials = client::credentials_from_environment();
    if (cmd.op == "add") {
        std::string line;
        if (!std::getline(std::cin, line) || line.empty())
            return base::fail(base::errc::invalid_argument,
                              "add reads the new user's secret from standard input (one line)");
        cmd.secret = std::move(line);
    }
    return cmd;
}

}  // namespace

void print_admin_usage(std::FILE* to) {
    std::fputs(
        "usage: fjord admin user add KEY   (the secret on stdin)\n"
        "       fjord admin user rm KEY\n       fjord admin user ls\n"
        "options: --endpoint http://127.0.0.1:9000 --ca-cert FILE; signed with the root "
        "user's FJORD_ACCESS_KEY / FJORD_SECRET_KEY\n",
        to);
}

int admin_main(int argc, char** argv) {
    if (asks_for_help(argc, argv)) return print_admin_usage(stdout), 0;
    auto cmd = parse_admin_args(argc, argv);
    if (!cmd) {
        std::fprintf(stderr, "fjord admin: %s\n", cmd.err().message.c_str());
        print_admin_usage(stderr);
        return 2;
    }
    admin_outcome out;
    io::reactor_group group(1);
    group.run([&cmd, &out, &group](unsigned) { io::spawn(run_admin(&*cmd, &out, &group)); });
    if (!out.status) {
        std::fprintf(stderr, "fjord admin: %s\n", out.status.err().message.c_str());
        return 1;
    }
    for (const auto& user : out.users) std::printf("%s\n", user.c_str());
    return 0;
}

}  // namespace fjord::cli

/* The native client stands alone: this program links fjord_client and nothing else (the build checks
 * that fjord_client's link closure holds none of the server's libraries: tests/unit/CMakeLists.txt), and
 * drives the whole client stack without a server: a client with one reactor thread asks a port nobody
 * listens on and must fail cleanly with -EIO, then shuts down. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client/fjord_client.h"

int main(void) {
    fjord_client_config config;
    memset(&config, 0, sizeof config);
    config.endpoint = "127.0.0.1:1";
    config.access_key = "standalone";
    config.secret_key = "standalone-secret";
    config.threads = 1;
    config.max_attempts = 1;
    config.request_timeout_ms = 10000;
    fjord_client* client = NULL;
    int rc = fjord_client_create(&config, &client);
    if (rc != 0) {
        fprintf(stderr, "fjord_client_create: %d (%s)\n", rc, fjord_last_error());
        return 1;
    }
    fjord_object_info info;
    rc = fjord_head(client, "bucket", "key", &info);
    fjord_client_destroy(client);
    if (rc != -EIO) {
        fprintf(stderr, "HEAD on a closed port: %d (%s), expected -EIO\n", rc, fjord_last_error());
        return 1;
    }
    printf("ok: %s\n", fjord_last_error());
    return 0;
}

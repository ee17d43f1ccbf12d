/* The C ABI of the native client (src/client/fjord_client.h) against a running S3 server.
 * It starts nothing itself: FJORD_TEST_ENDPOINT names the server (tests/integration/test_client.py
 * runs it against a fresh `fjord serve`); without it the test skips (exit 77). Keys come from
 * FJORD_TEST_ACCESS_KEY / FJORD_TEST_SECRET_KEY, the bucket from FJORD_TEST_BUCKET (default
 * c-abi-test); FJORD_TEST_SEED seeds the data (printed). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/fjord_client.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__,      \
                    #cond, fjord_last_error());                                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const char* env_or(const char* name, const char* fallback) {
    const char* v = getenv(name);
    return v && *v ? v : fallback;
}

static void fill(unsigned char* p, size_t n, unsigned long long seed) {
    unsigned long long s = seed | 1;
    for (size_t i = 0; i < n; ++i) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (unsigned char)(s >> 24);
    }
}

typedef struct {
    fjord_client* client;
    const char* bucket;
    int index;
    unsigned long long seed;
    int failed;
} thread_arg;

/* Several threads at once: each PUTs, GETs back and compares its own object. */
static void* round_trip(void* p) {
    thread_arg* a = (thread_arg*)p;
    enum { size = 300000 };
    unsigned char* data = malloc(size);
    unsigned char* back = malloc(size);
    char key[64];
    fjord_object_info info;
    snprintf(key, sizeof key, "threads/%d", a->index);
    fill(data, size, a->seed + (unsigned long long)a->index);
    a->failed = fjord_put(a->client, a->bucket, key, data, size, NULL) != 0 ||
                fjord_get(a->client, a->bucket, key, 0, back, size, NULL, &info) != 0 ||
                info.size_bytes != size || memcmp(data, back, size) != 0 ||
                fjord_delete(a->client, a->bucket, key) != 0;
    free(data);
    free(back);
    return NULL;
}

int main(void) {
    const char* endpoint = getenv("FJORD_TEST_ENDPOINT");
    if (!endpoint || !*endpoint) {
        printf("SKIP: FJORD_TEST_ENDPOINT is not set\n");
        return 77;
    }
    unsigned long long seed = strtoull(env_or("FJORD_TEST_SEED", "12345"), NULL, 10);
    printf("c_abi_test: endpoint %s seed %llu\n", endpoint, seed);
    const char* bucket = env_or("FJORD_TEST_BUCKET", "c-abi-test");

    fjord_client_config config;
    memset(&config, 0, sizeof config);
    config.endpoint = endpoint;
    config.access_key = env_or("FJORD_TEST_ACCESS_KEY", "fjordadmin");
    config.secret_key = env_or("FJORD_TEST_SECRET_KEY", "fjordadmin-secret");
    config.threads = 2;
    config.crc32c_trailer = atoi(env_or("FJORD_TEST_TRAILER", "0"));
    fjord_client* client = NULL;
    CHECK(fjord_client_create(NULL, &client) == -EINVAL);
    CHECK(fjord_client_create(&config, &client) == 0 && client != NULL);
    CHECK(fjord_create_bucket(client, bucket) == 0);
    CHECK(fjord_create_bucket(client, bucket) == 0); /* already ours: still a success */

    /* Small PUT, HEAD, whole and ranged GET. */
    enum { small = 1000 };
    unsigned char data[small], back[small];
    fjord_object_info info;
    fill(data, small, seed);
    CHECK(fjord_put(client, bucket, "small", data, small, &info) == 0 && info.etag[0] != '\0');
    CHECK(fjord_head(client, bucket, "small", &info) == 0 && info.size_bytes == small);
    memset(back, 0, sizeof back);
    CHECK(fjord_get(client, bucket, "small", 0, back, sizeof back, NULL, &info) == 0);
    CHECK(info.size_bytes == small && memcmp(back, data, small) == 0);
    CHECK(fjord_get(client, bucket, "small", 100, back, 50, NULL, &info) == 0);
    CHECK(info.size_bytes == 50 && memcmp(back, data + 100, 50) == 0);
    CHECK(fjord_get(client, bucket, "small", 990, back, 50, NULL, &info) == 0 &&
          info.size_bytes == 10);
    CHECK(fjord_get(client, bucket, "small", small + 10, back, 50, NULL, &info) == -ERANGE);

    /* Multipart PUT with 5 MiB parts, read back in parallel 3 MiB ranges. */
    size_t big = (size_t)11 * 1024 * 1024 + 7;
    unsigned char* big_data = malloc(big);
    unsigned char* big_back = calloc(1, big + 100);
    CHECK(big_data && big_back);
    fill(big_data, big, seed + 1);
    fjord_transfer_config parts = {5 * 1024 * 1024, 3};
    CHECK(fjord_multipart_put(client, bucket, "dir/big", big_data, big, &parts, &info) == 0);
    CHECK(info.size_bytes == big &&
          strchr(info.etag, '-') != NULL); /* a multipart ETag: "<hex>-3" */
    CHECK(fjord_head(client, bucket, "dir/big", &info) == 0 && info.size_bytes == big);
    fjord_transfer_config ranges = {3 * 1024 * 1024, 4};
    CHECK(fjord_get(client, bucket, "dir/big", 0, big_back, big + 100, &ranges, &info) == 0);
    CHECK(info.size_bytes == big && memcmp(big_back, big_data, big) == 0);
    /* A multipart part below the 5 MiB minimum fails, and the upload is aborted. */
    fjord_transfer_config tiny = {1024 * 1024, 2};
    CHECK(fjord_multipart_put(client, bucket, "dir/tiny-parts", big_data, 3 * 1024 * 1024, &tiny,
                              NULL) < 0);
    CHECK(fjord_head(client, bucket, "dir/tiny-parts", &info) == -ENOENT);

    /* Missing keys and buckets. */
    CHECK(fjord_head(client, bucket, "missing", &info) == -ENOENT);
    CHECK(fjord_get(client, bucket, "missing", 0, back, sizeof back, NULL, &info) == -ENOENT);
    CHECK(fjord_get(client, "no-such-bucket-c-abi", "k", 0, back, sizeof back, NULL, &info) ==
          -ENOENT);
    CHECK(fjord_put(client, bucket, "", data, 1, NULL) == -EINVAL);

    /* Four threads at once on one client. */
    pthread_t threads[4];
    thread_arg args[4];
    for (int i = 0; i < 4; ++i) {
        args[i] = (thread_arg){client, bucket, i, seed, 0};
        CHECK(pthread_create(&threads[i], NULL, round_trip, &args[i]) == 0);
    }
    for (int i = 0; i < 4; ++i) {
        pthread_join(threads[i], NULL);
        CHECK(!args[i].failed);
    }

    CHECK(fjord_delete(client, bucket, "small") == 0);
    CHECK(fjord_delete(client, bucket, "dir/big") == 0);
    CHECK(fjord_head(client, bucket, "small", &info) == -ENOENT);
    fjord_client_destroy(client);

    /* Wrong secret: refused, and not retried into a timeout. */
    config.secret_key = "wrong-secret";
    CHECK(fjord_client_create(&config, &client) == 0);
    CHECK(fjord_put(client, bucket, "denied", data, small, NULL) == -EACCES);
    fjord_client_destroy(client);
    free(big_data);
    free(big_back);
    printf("c_abi_test: all checks passed\n");
    return 0;
}
